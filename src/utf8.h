#ifndef EMBER_SRC_UTF8_H
#define EMBER_SRC_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Is s[0..n) well-formed UTF-8 (RFC 3629: no overlongs, no surrogates,
 * nothing past U+10FFFF)? Wire strings must be, since they end up in JSON. */
bool ember__utf8_valid(const char *s, size_t n);

#endif
