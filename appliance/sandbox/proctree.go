package sandbox

import (
	"bytes"
	"os"
	"strconv"
)

// procEntries lists the numeric entries of /proc (process ids).
func procEntries() []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// childrenOf returns the processes whose parent is ppid. It reads the
// children lists of ppid's threads (/proc/PID/task/TID/children), and where
// the kernel lacks them (CONFIG_PROC_CHILDREN) every /proc/*/stat: on a busy
// host that is thousands of files per call, and the supervisor calls it in
// every round of reaping.
func childrenOf(ppid int) []int {
	if out, ok := childrenLists(ppid); ok {
		return out
	}
	var out []int
	buf := make([]byte, 512)
	for _, pid := range procEntries() {
		if pp, ok := parentOf(pid, buf); ok && pp == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// parentOf reads the parent pid from /proc/pid/stat: "pid (comm) S ppid …",
// where comm may hold spaces and parentheses, so parse after the last ')'.
func parentOf(pid int, buf []byte) (int, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	n, _ := f.Read(buf)
	f.Close()
	b := buf[:n]
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(string(fields[1]))
	return pp, err == nil
}

// tasksOfUser counts the tasks (threads included) whose real uid is uid:
// the kernel's RLIMIT_NPROC counts those, across all of the user's processes,
// so a per-command budget must be added on top of it.
func tasksOfUser(uid int) uint64 {
	var total uint64
	buf := make([]byte, 4096)
	want := []byte(strconv.Itoa(uid))
	for _, pid := range procEntries() {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			continue
		}
		n, _ := f.Read(buf)
		f.Close()
		var uidMatch bool
		var threads uint64 = 1
		for _, line := range bytes.Split(buf[:n], []byte{'\n'}) {
			if v, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
				if f := bytes.Fields(v); len(f) > 0 && bytes.Equal(f[0], want) {
					uidMatch = true
				}
			} else if v, ok := bytes.CutPrefix(line, []byte("Threads:")); ok {
				if t, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64); err == nil {
					threads = t
				}
			}
		}
		if uidMatch {
			total += threads
		}
	}
	return total
}

// childrenLists reads the children files of ppid's threads; ok is false
// where the kernel has none.
func childrenLists(ppid int) (out []int, ok bool) {
	dir := "/proc/" + strconv.Itoa(ppid) + "/task"
	d, err := os.Open(dir)
	if err != nil {
		return nil, false
	}
	tids, _ := d.Readdirnames(-1)
	d.Close()
	for _, tid := range tids {
		b, err := os.ReadFile(dir + "/" + tid + "/children")
		if err != nil {
			if os.IsNotExist(err) {
				return nil, false
			}
			continue // the thread ended
		}
		for _, f := range bytes.Fields(b) {
			if pid, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out, true
}
