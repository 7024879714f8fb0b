package appliance

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/config"
)

// SkillsOptions are the arguments of `perch skills`.
type SkillsOptions struct {
	ConfigPath string
	Action     string // list, show, install, remove
	Arg        string // skill name, or the folder to install
	Name       string // install under this name (default: the folder's)
	Stdout     io.Writer
}

var skillName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`) })

// Skills manages the workspace's skills folder.
func Skills(o SkillsOptions) error {
	cfg, err := config.Load(config.Options{Path: o.ConfigPath})
	if err != nil {
		return err
	}
	ws := cfg.WorkspaceDir()
	dir := filepath.Join(ws, "skills")
	switch o.Action {
	case "list":
		skills := agent.Skills(ws)
		if len(skills) == 0 {
			fmt.Fprintf(o.Stdout, "No skills in %s. Install one with 'perch skills install <folder with SKILL.md>'.\n", dir)
			return nil
		}
		for _, s := range skills {
			fmt.Fprintf(o.Stdout, "%-20s %s\n", s.Name, s.Summary)
		}
		return nil
	case "show":
		if !skillName().MatchString(o.Arg) {
			return fmt.Errorf("skills: %q is not a skill name (see 'perch skills list')", o.Arg)
		}
		data, err := os.ReadFile(filepath.Join(dir, o.Arg, "SKILL.md"))
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("skills: no skill %q in %s (see 'perch skills list')", o.Arg, dir)
		} else if err != nil {
			return fmt.Errorf("skills: %w", err)
		}
		_, err = o.Stdout.Write(data)
		return err
	case "install":
		src := o.Arg
		if _, err := os.Stat(filepath.Join(src, "SKILL.md")); err != nil {
			return fmt.Errorf("skills: %s has no SKILL.md; a skill is a folder with a SKILL.md describing when and how to use it", src)
		}
		name := o.Name
		if name == "" {
			abs, _ := filepath.Abs(src)
			name = filepath.Base(abs)
		}
		if !skillName().MatchString(name) {
			return fmt.Errorf("skills: %q is not a valid skill name (lower-case letters, digits, . _ -); pass --name", name)
		}
		dst := filepath.Join(dir, name)
		if _, err := os.Stat(dst); err == nil {
			return fmt.Errorf("skills: %s exists; remove it first with 'perch skills remove %s'", dst, name)
		}
		tmp := dst + ".installing"
		os.RemoveAll(tmp)
		if err := os.CopyFS(tmp, os.DirFS(src)); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("skills: copy %s: %w", src, err)
		}
		if err := os.Rename(tmp, dst); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("skills: %w", err)
		}
		fmt.Fprintf(o.Stdout, "Installed skill %s in %s\n", name, dst)
		return nil
	case "remove":
		if !skillName().MatchString(o.Arg) {
			return fmt.Errorf("skills: %q is not a skill name (see 'perch skills list')", o.Arg)
		}
		p := filepath.Join(dir, o.Arg)
		if _, err := os.Stat(filepath.Join(p, "SKILL.md")); err != nil {
			return fmt.Errorf("skills: no skill %q in %s", o.Arg, dir)
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("skills: %w", err)
		}
		fmt.Fprintf(o.Stdout, "Removed skill %s\n", o.Arg)
		return nil
	}
	return fmt.Errorf("skills: unknown action %q; use list, show, install or remove", o.Action)
}
