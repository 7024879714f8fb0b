package sandbox

import "golang.org/x/sys/unix"

var nativeSocketcall = []uint32{unix.SYS_SOCKETCALL}
