package tools

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// update rewrites golden files: go test ./appliance/tools -run TestX -update.
// Golden files hold what models read (tool definitions, converted pages), so
// a change to them is reviewed like a change to a user interface.
var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// golden compares got with testdata/name, or rewrites the file under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file (run with -update if the change is intended)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}
