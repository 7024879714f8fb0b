package sandbox

// socketcall exists on ARM only in the old ABI, which x/sys/unix (EABI)
// does not list; the table refuses its number anyway.
var nativeSocketcall = []uint32{102}
