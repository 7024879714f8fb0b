package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The dependency and size budget of the default build (CGO_ENABLED=0, no
// tags): every module linked into perch is one listed here, with why it is
// worth its size. Adding a module is a decision: measure `make cross` before
// and after, and write the reason beside it.
var allowedModules = []string{
	"github.com/perchhq/perch",                      // this module
	"golang.org/x/",                                 // the Go project's own extensions (sys, net, oauth2, crypto, text)
	"periph.io/x/conn/v3",                           // I²C/SPI interfaces and registries
	"periph.io/x/host/v3",                           // sysfs and gpio drivers (only those; see denied)
	"periph.io/x/devices/v3",                        // BMx280 and BH1750 drivers
	"go.etcd.io/bbolt",                              // the database
	"github.com/julienschmidt/httprouter",           // HTTP routing
	"github.com/sashabaranov/go-openai",             // the provider client
	"github.com/robfig/cron/v3",                     // cron expressions
	"github.com/coreos/go-systemd/v22",              // sd_notify, unit status over D-Bus
	"github.com/godbus/dbus/v5",                     // D-Bus for go-systemd
	"github.com/landlock-lsm/go-landlock",           // exec sandbox
	"kernel.org/pub/linux/libs/security/libcap/psx", // go-landlock's all-threads syscalls
	"github.com/lmittmann/tint",                     // log formatting
	"github.com/gorilla/websocket",                  // Slack Socket Mode, Discord gateway, MQTT over ws:// and wss://
	"github.com/eclipse/paho.golang",                // MQTT 5 link to a broker: response topics, correlation data, manual acks (+640 KiB with gorilla/websocket)
	"cloud.google.com/go/compute/metadata",          // oauth2/google's ADC on Google Cloud
}

// deniedPackages must never be in the default build: cgo-only code (behind
// the udev tag), periph's SoC register drivers, which host.Init would pull
// in (~0.7 MB on arm64) for GPIO Perch does not use, and the standard
// library's profilers and debug endpoints (~400 KB, and a handler that
// dumps memory holding the keys is not something an appliance may carry).
var deniedPackages = []string{
	"net/http/pprof",
	"runtime/pprof",
	"expvar",
	"github.com/jochenvg/go-udev",
	"github.com/jkeiser/iter",
	"periph.io/x/host/v3/bcm283x",
	"periph.io/x/host/v3/allwinner",
	"periph.io/x/host/v3/rpi",
	"periph.io/x/host/v3/pine64",
	"periph.io/x/host/v3/ftdi",
	"periph.io/x/d2xx",
}

// maxArm64Bytes is the size goal for the stripped arm64 binary.
const maxArm64Bytes = 12 << 20

type listedPackage struct {
	ImportPath     string
	Standard       bool
	GoFiles        []string
	CgoFiles       []string
	IgnoredGoFiles []string
	Module         *struct{ Path string }
	Error          *struct{ Err string }
	DepsErrors     []*struct{ Err string }
}

func goTool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to inspect the build: %v", err)
	}
	return path
}

// listDeps runs go list -deps -json on pkg (with extra go list arguments
// before it) with env added.
func listDeps(t *testing.T, env []string, args ...string) []listedPackage {
	t.Helper()
	cmd := exec.Command(goTool(t), append([]string{"list", "-e", "-deps", "-json"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list returned no packages")
	}
	return pkgs
}

// buildProblems lists packages that do not build (go list with cgo off),
// including those whose every file needs cgo or a tag: they list without
// error but leave their importers with undefined names.
func buildProblems(pkgs []listedPackage) []string {
	var out []string
	for _, p := range pkgs {
		if !p.Standard && len(p.GoFiles)+len(p.CgoFiles) == 0 && len(p.IgnoredGoFiles) > 0 {
			out = append(out, p.ImportPath+" has no Go files with CGO_ENABLED=0 (all need cgo or a build tag)")
		}
		if p.Error != nil {
			out = append(out, p.ImportPath+" does not build with CGO_ENABLED=0: "+p.Error.Err)
		}
		for _, e := range p.DepsErrors {
			out = append(out, p.ImportPath+": dependency error with CGO_ENABLED=0: "+e.Err)
		}
	}
	return out
}

// cgoProblems lists non-standard packages with C files (go list with cgo
// on, as go test -race has it).
func cgoProblems(pkgs []listedPackage) []string {
	var out []string
	for _, p := range pkgs {
		if !p.Standard && len(p.CgoFiles) > 0 {
			out = append(out, p.ImportPath+" has cgo files "+strings.Join(p.CgoFiles, ", ")+
				"; put them behind a build tag, as drivers/usb does with udev")
		}
	}
	return out
}

// budgetProblems lists modules off the allow list and denied packages.
func budgetProblems(pkgs []listedPackage) []string {
	var out []string
	for _, p := range pkgs {
		for _, d := range deniedPackages {
			if p.ImportPath == d || strings.HasPrefix(p.ImportPath, d+"/") {
				out = append(out, p.ImportPath+" is linked into the default build; it must not be (see deniedPackages)")
			}
		}
		if p.Standard {
			continue
		}
		switch {
		case p.Module == nil:
			out = append(out, p.ImportPath+" belongs to no module")
		case !allowed(p.Module.Path):
			out = append(out, "module "+p.Module.Path+" (package "+p.ImportPath+") is not in the dependency budget; "+
				"weigh its size with make cross and add it to allowedModules in cmd/perch/deps_test.go with the reason")
		}
	}
	return out
}

// TestDefaultBuildNeedsNoCgo: with cgo off every dependency builds, and with
// cgo on (as go test -race has it) none outside the standard library has C
// files. A cgo-only package would break the static cross builds; one with C
// files would make -race need its C library.
func TestDefaultBuildNeedsNoCgo(t *testing.T) {
	for _, p := range buildProblems(listDeps(t, []string{"CGO_ENABLED=0"}, ".")) {
		t.Error(p)
	}
	for _, p := range cgoProblems(listDeps(t, []string{"CGO_ENABLED=1"}, ".")) {
		t.Error(p)
	}
}

// TestDependenciesAreBudgeted: every module linked is on the allow list,
// and no denied package is linked.
func TestDependenciesAreBudgeted(t *testing.T) {
	for _, p := range budgetProblems(listDeps(t, []string{"CGO_ENABLED=0"}, ".")) {
		t.Error(p)
	}
}

// TestChecksCatchTheUdevBuild: the checks do fire. drivers/usb built with
// the udev tag is exactly what must never reach the default build: go-udev
// has C files, is denied, and needs cgo.
func TestChecksCatchTheUdevBuild(t *testing.T) {
	usb := "github.com/perchhq/perch/drivers/usb"
	withCgo := listDeps(t, []string{"CGO_ENABLED=1"}, "-tags", "udev", usb)
	if p := cgoProblems(withCgo); len(p) == 0 || !strings.Contains(strings.Join(p, "\n"), "github.com/jochenvg/go-udev has cgo files") {
		t.Errorf("cgo check missed go-udev: %q", p)
	}
	if p := budgetProblems(withCgo); !strings.Contains(strings.Join(p, "\n"), "github.com/jochenvg/go-udev is linked") {
		t.Errorf("budget check missed go-udev: %q", p)
	}
	withoutCgo := listDeps(t, []string{"CGO_ENABLED=0"}, "-tags", "udev", "github.com/jochenvg/go-udev")
	if p := buildProblems(withoutCgo); len(p) == 0 {
		t.Error("build check passed go-udev without cgo")
	}
	// And the default build of the driver is clean.
	if p := append(cgoProblems(listDeps(t, []string{"CGO_ENABLED=1"}, usb)),
		budgetProblems(listDeps(t, []string{"CGO_ENABLED=0"}, usb))...); len(p) > 0 {
		t.Errorf("drivers/usb default build: %q", p)
	}
}

func allowed(mod string) bool {
	for _, a := range allowedModules {
		if mod == a || (strings.HasSuffix(a, "/") && strings.HasPrefix(mod, a)) {
			return true
		}
	}
	return false
}

func TestAllowListMatching(t *testing.T) {
	for mod, want := range map[string]bool{
		"golang.org/x/sys":                  true,
		"go.etcd.io/bbolt":                  true,
		"go.etcd.io/bbolt2":                 false,
		"github.com/sashabaranov/go-openai": true,
		"github.com/jochenvg/go-udev":       false,
		"github.com/bigcorp/sdk":            false,
	} {
		if got := allowed(mod); got != want {
			t.Errorf("allowed(%q) = %v, want %v", mod, got, want)
		}
	}
}

// TestStrippedArm64Size builds perch as make cross does and checks it stays
// within the size goal for the boards.
func TestStrippedArm64Size(t *testing.T) {
	out := filepath.Join(t.TempDir(), "perch_linux_arm64")
	cmd := exec.Command(goTool(t), "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stripped linux/arm64 binary: %.2f MiB (budget %d MiB)", float64(fi.Size())/(1<<20), maxArm64Bytes>>20)
	if fi.Size() > maxArm64Bytes {
		t.Errorf("perch for arm64 is %.2f MiB, over the %d MiB budget; find what grew with `go tool nm -size -sort size`",
			float64(fi.Size())/(1<<20), maxArm64Bytes>>20)
	}
}
