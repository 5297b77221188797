/* The ember command's subcommands, one file each. Each takes the arguments
 * after its name and returns the process exit status. */
#ifndef EMBER_CLI_H
#define EMBER_CLI_H

/* Exit statuses every subcommand shares (README "Exit codes"). */
#define EXIT_FAILED    1   /* the server, the network or a local file failed */
#define EXIT_USAGE     2   /* bad arguments (here or as the server judged them) */
#define EXIT_EMPTY     3   /* the query worked and matched nothing */
#define EXIT_CANCELLED 130 /* Ctrl-C cancelled a session, as a shell reports it */

int ember__cmd_up(int argc, char **argv);

/* query.c: clients of the HTTP API. `ember workers`, `ember versions|hosts|
 * actors` (which names the command), `ember query`, `ember diff`. */
int ember__cmd_workers(int argc, char **argv);
int ember__cmd_labels(const char *which, int argc, char **argv);
int ember__cmd_query(int argc, char **argv);
int ember__cmd_diff(int argc, char **argv);

/* profile.c: `ember profile` (an on-demand session) and `ember sessions`. */
int ember__cmd_profile(int argc, char **argv);
int ember__cmd_sessions(int argc, char **argv);

/* alerts.c: `ember alerts` and `ember alerts show ID`. */
int ember__cmd_alerts(int argc, char **argv);
/* rules.c: `ember rules [list]`, `ember rules add`, `ember rules delete`. */
int ember__cmd_rules(int argc, char **argv);
/* sourcemaps.c: `ember sourcemaps [list]`, `upload`, `delete`. */
int ember__cmd_sourcemaps(int argc, char **argv);

/* Synopsis and option help of the query commands, for `ember help`. */
extern const char ember__usage_query[];
extern const char ember__usage_query_notes[];
extern const char ember__usage_profile[];
extern const char ember__usage_profile_notes[];
extern const char ember__usage_alerts[];
extern const char ember__usage_alerts_notes[];
extern const char ember__usage_rules[];
extern const char ember__usage_rules_notes[];
extern const char ember__usage_sourcemaps[];
extern const char ember__usage_sourcemaps_notes[];

#endif
