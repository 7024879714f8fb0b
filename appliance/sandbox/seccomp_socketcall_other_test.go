//go:build linux && !(386 || arm)

package sandbox

var nativeSocketcall []uint32
