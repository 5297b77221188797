/* What the codec's files (codec.c, codec_collector.c) share: the
 * allocator protobuf-c unpacks through (Ember's, so allocation failures
 * are testable) and the sentence-writing error helper. Internal to src/.
 * Thread-safe: no state. */
#ifndef EMBER_SRC_CODEC_INTERNAL_H
#define EMBER_SRC_CODEC_INTERNAL_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

/* ember_malloc / ember_free behind protobuf-c's allocator interface. */
extern ProtobufCAllocator ember__codec_pb_allocator;

/* Write the sentence into errbuf (may be NULL or 0 bytes) and return rc. */
int ember__codec_fail(int rc, char *errbuf, size_t errbuf_size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
