package config

import (
	"os"
	"path/filepath"
	"testing"
)

// On a board set up by the package, a command run without PERCH_HOME or a
// config of the user's own acts on the service's config and home; a user's
// own ~/.perch and PERCH_HOME still win.
func TestThePackagesLayoutIsFoundWithoutPerchHome(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "root")
	t.Setenv("HOME", home)
	t.Setenv("PERCH_HOME", "")
	oldConfig, oldHome := PackageConfig, PackageHome
	t.Cleanup(func() { PackageConfig, PackageHome = oldConfig, oldHome })
	PackageConfig, PackageHome = filepath.Join(root, "etc", "perch", "config.json"), filepath.Join(root, "var", "lib", "perch")
	own := filepath.Join(home, ".perch")

	if Dir() != own || DefaultPath() != filepath.Join(own, "config.json") {
		t.Errorf("no package: %s, %s; want ~/.perch", Dir(), DefaultPath())
	}
	os.MkdirAll(filepath.Dir(PackageConfig), 0o700)
	os.WriteFile(PackageConfig, []byte("{}"), 0o600)
	if Dir() != PackageHome || DefaultPath() != PackageConfig {
		t.Errorf("package installed: %s, %s; want the service's", Dir(), DefaultPath())
	}
	cfg, err := Load(Options{Env: func(string) (string, bool) { return "", false }})
	if err != nil || cfg.Path() != PackageConfig || cfg.DBPath() != filepath.Join(PackageHome, "perch.db") {
		t.Errorf("Load: %v; want the package's config and database", err)
	}
	os.MkdirAll(own, 0o700)
	os.WriteFile(filepath.Join(own, "config.json"), []byte("{}"), 0o600)
	if Dir() != own {
		t.Errorf("a config of the user's own: %s; want ~/.perch", Dir())
	}
	t.Setenv("PERCH_HOME", filepath.Join(root, "elsewhere"))
	if Dir() != filepath.Join(root, "elsewhere") {
		t.Errorf("PERCH_HOME: %s", Dir())
	}
}
