/* The ember command's subcommands, one file each. Each takes the arguments
 * after its name and returns the process exit status. */
#ifndef EMBER_CLI_H
#define EMBER_CLI_H

/* Exit statuses every subcommand shares. */
#define EXIT_USAGE 2 /* bad arguments: the message says which */

int ember__cmd_up(int argc, char **argv);

#endif
