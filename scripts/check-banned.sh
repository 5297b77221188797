#!/usr/bin/env bash
# STYLE.md rule 17: no unbounded or unchecked string and number functions in
# Ember's C code. strtoull/strtoll are allowed only inside src/parse.c, the
# checked wrappers everything else must use.
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.c' '*.h')
status=0
banned='\b(sprintf|vsprintf|strcpy|strcat|strtok|gets|atoi|atol|atoll|atof)[[:space:]]*\('
if grep -nE "$banned" "${files[@]}"; then
  echo "check-banned: use snprintf, ember_buf_*, memcpy with a length, strtok_r or ember_parse_*" >&2
  status=1
fi
unchecked='\b(strtol|strtoul|strtoll|strtoull|strtod)[[:space:]]*\('
# tests/programs/ are stand-alone fixture programs (not linked with Ember)
# whose strtol calls check end pointers themselves.
if grep -nE "$unchecked" "${files[@]}" | grep -vE '^(src/parse.c|tests/programs/[^:]*):'; then
  echo "check-banned: call ember_parse_u64/ember_parse_i64 (src/parse.c) instead" >&2
  status=1
fi
[ $status -eq 0 ] && echo "check-banned: ${#files[@]} files clean"
exit $status
