package gateway

import "syscall"

const syscallEADDRINUSE = syscall.EADDRINUSE
