// The rlid executable: everything lives in the registered commands.
#include "cli/command.h"

int main(int argc, char** argv) { return rlid::cli::RunCli(argc, argv); }
