// Keeps conform_model a valid library while model/ is being filled in.
