package appliance

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func rssFileKB(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range strings.Split(string(data), "\n") {
		if f := strings.Fields(ln); len(f) >= 2 && f[0] == "RssFile:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// TestTrimWorkingSetDropsBinaryPages: after the trim the process holds fewer
// pages of its own binary.
func TestTrimWorkingSetDropsBinaryPages(t *testing.T) {
	before := rssFileKB(t)
	advised := trimWorkingSet()
	after := rssFileKB(t)
	if advised == 0 {
		t.Fatal("no mapping of the binary was advised (MADV_PAGEOUT unsupported?)")
	}
	if after >= before {
		t.Fatalf("RssFile %d kB before, %d kB after the trim", before, after)
	}
	t.Logf("RssFile %d kB -> %d kB (%d kB of mappings advised)", before, after, advised>>10)
}
