//go:build linux && !(386 || arm)

package sandbox

var nativeFcntl64 []uint32
