/* The profile answers shared by the handlers that serve profiles
 * (api_profiles.c, api_sessions.c): the parameters type, format and sort,
 * and a profile sent in the format asked for. Conventions as api_req.h:
 * each returns 0 or the status of the error it recorded in `r`. */
#ifndef EMBER_COLLECTOR_API_PROFILES_H
#define EMBER_COLLECTOR_API_PROFILES_H

#include <stddef.h>
#include <stdint.h>

#include "api_req.h"
#include "ember/profile.h"
#include "query.h"

/* type=cpu|samples|alloc_objects|alloc_bytes (default cpu). */
unsigned ember__api_parse_type(ember__req_t *r, ember__qtype_t *out);
/* format=tree|pprof|folded|speedscope|top (default tree), as an index for
 * ember__api_answer_profile. */
unsigned ember__api_parse_format(ember__req_t *r, size_t *out);
/* sort=self|total, for format=top: sets r->top_by. */
unsigned ember__api_parse_sort(ember__req_t *r);
/* raw=VT, the question of a peer collector (fleetq.h): valid only with
 * local=1 and format absent or ember; the value type into *vt. */
unsigned ember__api_parse_raw(ember__req_t *r, const char *raw, ember_value_type_t *vt);
/* Answer with profile `p` (one value type, borrowed) in format `fmt`:
 * trees cut at max_nodes, top at `limit` functions; `name` starts the
 * download's file name ("ember" gives ember-cpu.pb.gz). */
unsigned ember__api_answer_profile(ember__req_t *r, const ember_profile_t *p, size_t fmt,
                                   uint64_t max_nodes, uint64_t limit, const char *name);

#endif
