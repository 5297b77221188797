/* Placeholder so the library has a source until its modules land. */
typedef int ember__collector_placeholder_t;
