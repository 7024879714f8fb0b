package version

import (
	"os"
	"time"
)

func exeTime() time.Time {
	exe, err := os.Executable()
	if err != nil {
		return time.Unix(0, 0)
	}
	st, err := os.Stat(exe)
	if err != nil {
		return time.Unix(0, 0)
	}
	return st.ModTime()
}
