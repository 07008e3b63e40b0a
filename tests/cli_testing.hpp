// Running the built conform command from a test: exit status and the
// combined stdout + stderr.  ctest runs the tests of one file in parallel
// processes, so the capture file is named by process and call.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace conform::cli_testing {

inline int run_conform(const std::string& args, std::string* output = nullptr) {
    static int calls = 0;
    const std::string out = (std::filesystem::temp_directory_path() /
                             ("conform_cli_out." + std::to_string(getpid()) + "." + std::to_string(calls++) + ".txt"))
                                .string();
    std::string command = CONFORM_BINARY;  // appended piecewise: GCC 12 warns (-Warray-bounds) on a + chain here
    command += " ";
    command += args;
    command += " > " + out + " 2>&1";
    const int rc = std::system(command.c_str());
    if (output) {
        std::ifstream in(out);
        output->assign(std::istreambuf_iterator<char>(in), {});
    }
    std::filesystem::remove(out);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace conform::cli_testing
