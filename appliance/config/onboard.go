package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// ErrExists is returned by Onboard when the config file exists and force is
// not set.
var ErrExists = errors.New("config: file exists")

// OnboardResult says what Onboard wrote.
type OnboardResult struct {
	ConfigPath string
	Workspace  string
	Created    []string // workspace files created (existing ones are kept)
	Token      string   // the new gateway.api_token
	// Backup is where the replaced config was kept (force only).
	Backup string
}

// Onboard writes a complete config at path (every section present, channels
// disabled, the gateway on 0.0.0.0 behind a fresh random api_token) and
// creates the workspace with starter files. It never overwrites a config
// without force, and never overwrites workspace files at all: they are the
// user's.
func Onboard(path string, force bool) (*OnboardResult, error) {
	if path == "" {
		path = DefaultPath()
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	backup := ""
	if _, err := os.Stat(path); err == nil && !force {
		return nil, fmt.Errorf("%w: %s (use 'perch onboard --force' to replace it; the workspace is kept)", ErrExists, path)
	} else if err == nil {
		// The old file holds keys and tokens the new one will not: keep it.
		old, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		backup = path + ".bak"
		if err := os.WriteFile(backup, old, 0o600); err != nil {
			return nil, fmt.Errorf("config: keep the old config as %s: %w", backup, err)
		}
	} else if errors.Is(err, syscall.ENOTDIR) {
		return nil, homeIsAFile(path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg := Fresh(path)
	if err := os.MkdirAll(cfg.dir, 0o700); err != nil {
		return nil, fmt.Errorf("config: create %s: %w", cfg.dir, err)
	}
	if err := cfg.Save(); err != nil {
		return nil, err
	}
	res := &OnboardResult{ConfigPath: path, Workspace: cfg.WorkspaceDir(), Token: cfg.Gateway.APIToken.Value(), Backup: backup}
	created, err := seedWorkspace(res.Workspace)
	res.Created = created
	return res, err
}

// Starter files of a new workspace. The agent reads AGENT.md, USER.md and
// memory/MEMORY.md into its system prompt.
var starterFiles = map[string]string{
	"AGENT.md": `# Agent

You are Perch, an AI assistant living on a small Linux board. You can read and
write files in your workspace, run shell commands there, search and fetch web
pages, schedule reminders, and read the board's sensors and buses.

- Be brief: people read you on a phone.
- Ask before anything that writes to hardware or deletes files.
- Keep notes worth remembering in memory/MEMORY.md.
`,
	"USER.md": `# User

Write here what the agent should know about you: name, language, time zone,
preferences. The agent reads this file at the start of every turn.
`,
	"memory/MEMORY.md": `# Memory

Long-term notes the agent keeps for itself.
`,
	"skills/README.md": `# Skills

Each skill is a folder here with a SKILL.md describing when and how to use it.
Manage them with 'perch skills list|show|install|remove'.
`,
}

func seedWorkspace(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("config: create workspace %s: %w", dir, err)
	}
	var created []string
	for _, name := range slices.Sorted(maps.Keys(starterFiles)) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if _, err := os.Stat(p); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return created, fmt.Errorf("config: create %s: %w", filepath.Dir(p), err)
		}
		if err := WriteFileAtomic(p, []byte(starterFiles[name]), 0o644); err != nil {
			return created, err
		}
		created = append(created, name)
	}
	return created, nil
}
