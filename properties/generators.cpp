namespace conform {}
