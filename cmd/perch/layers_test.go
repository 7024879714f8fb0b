package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/perchhq/perch/"

// pkgImports is a package of this module and what its non-test files import.
type pkgImports struct {
	ImportPath string
	Imports    []string
}

// The house rules, as imports (tests may import anything):
//   - package appliance, the composition root, is imported only by cmd/ and
//     by test helper packages (…test); the CLI gets it handed in by main;
//   - the provider does not reach into the store: both speak appliance/chat;
//   - store/, drivers/ and systemd/ stand on their own: nothing of appliance/
//     but the leaf appliance/chat;
//   - appliance/chat and appliance/api are leaves: no package of this module.
func layerProblems(pkgs []pkgImports) []string {
	var out []string
	bad := func(p pkgImports, imp, why string) {
		out = append(out, p.ImportPath+" imports "+imp+": "+why)
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p.ImportPath, mod)
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			irel := strings.TrimPrefix(imp, mod)
			switch {
			case irel == "appliance" && !strings.HasPrefix(rel, "cmd/") && !strings.HasSuffix(rel, "test"):
				bad(p, imp, "only cmd/ and test helpers import the composition root")
			case rel == "appliance/provider" && (irel == "store" || strings.HasPrefix(irel, "store/")):
				bad(p, imp, "the provider speaks appliance/chat, not the store's API")
			case (rel == "store" || strings.HasPrefix(rel, "store/") || strings.HasPrefix(rel, "drivers/") ||
				rel == "systemd" || strings.HasPrefix(rel, "systemd/")) &&
				strings.HasPrefix(irel, "appliance") && irel != "appliance/chat":
				bad(p, imp, "store, drivers and systemd import nothing of appliance/ but appliance/chat")
			case rel == "appliance/chat" || rel == "appliance/api":
				bad(p, imp, "a leaf package imports nothing of this module")
			}
		}
	}
	return out
}

func listImports(t *testing.T) []pkgImports {
	t.Helper()
	cmd := exec.Command(goTool(t), "list", "-e", "-json=ImportPath,Imports", "../../...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkgImports
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var p pkgImports
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestLayers(t *testing.T) {
	pkgs := listImports(t)
	if !slices.ContainsFunc(pkgs, func(p pkgImports) bool { return p.ImportPath == mod+"appliance/cli" }) {
		t.Fatalf("go list did not see the module's packages (%d listed)", len(pkgs))
	}
	for _, p := range layerProblems(pkgs) {
		t.Error(p)
	}
}

// TestLayerRulesCatchViolations: each rule fires on the import it forbids,
// and the allowed imports pass.
func TestLayerRulesCatchViolations(t *testing.T) {
	bad := []pkgImports{
		{mod + "appliance/cli", []string{mod + "appliance"}},
		{mod + "appliance/channel/telegram", []string{mod + "appliance"}},
		{mod + "appliance/provider", []string{mod + "store"}},
		{mod + "store", []string{mod + "appliance/config"}},
		{mod + "drivers/i2c", []string{mod + "appliance/tools"}},
		{mod + "systemd", []string{mod + "appliance"}},
		{mod + "appliance/chat", []string{mod + "store"}},
		{mod + "appliance/api", []string{mod + "appliance/chat"}},
	}
	for _, p := range bad {
		if got := layerProblems([]pkgImports{p}); len(got) != 1 {
			t.Errorf("%s → %v: %d problems, want 1", p.ImportPath, p.Imports, len(got))
		}
	}
	good := []pkgImports{
		{mod + "cmd/perch", []string{mod + "appliance", mod + "appliance/cli"}},
		{mod + "appliance/appliancetest", []string{mod + "appliance"}},
		{mod + "store", []string{mod + "appliance/chat", "go.etcd.io/bbolt"}},
		{mod + "appliance/provider", []string{mod + "appliance/chat", mod + "appliance/config"}},
		{mod + "appliance/chat", []string{"encoding/json"}},
	}
	if got := layerProblems(good); len(got) != 0 {
		t.Errorf("allowed imports refused: %v", got)
	}
}
