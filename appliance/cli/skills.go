package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/perchhq/perch/appliance/agent"
)

var skillName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`) })

func skillsCommand() *Command {
	var (
		installAs string
		replace   bool
	)
	return &Command{
		Name:     "skills",
		Synopsis: "list | show NAME | install FOLDER [--name N] [--replace] | remove NAME",
		Summary:  "manage the agent's skills (folders with a SKILL.md in the workspace)",
		Help: `A skill is a folder with a SKILL.md that says when and how to use it; the agent reads the list of
skills into its instructions and opens a SKILL.md when it needs it. install --replace puts a new
version in place of an installed skill of the same name in one step (the old one is gone only once
the new one is in place).`,
		Subcommands: []string{"list", "show", "install", "remove"},
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&installAs, "name", "", "install: the skill's `name` (default: the folder's)")
			fs.BoolVar(&replace, "replace", false, "install: replace an installed skill of the same name")
		},
		Run: func(_ context.Context, e *Env, args []string) error {
			if len(args) == 0 {
				return usageError("skills", "say what to do: list, show, install or remove")
			}
			action, arg, name := args[0], "", installAs
			switch action {
			case "list":
				if len(args) != 1 {
					return usageError("skills", "list takes no argument")
				}
			case "show", "install", "remove":
				if len(args) != 2 {
					return usageError("skills", "%s takes one argument", action)
				}
				arg = args[1]
			default:
				return usageError("skills", "unknown action %q; use list, show, install or remove", action)
			}
			cfg, err := e.loadConfig()
			if err != nil {
				return err
			}
			ws := cfg.WorkspaceDir()
			dir := filepath.Join(ws, "skills")
			if action == "install" || action == "remove" {
				// The agent's commands write in the workspace: a link in
				// place of skills/ or of the skill's folder would have this
				// command, often run with sudo, write or delete elsewhere.
				for _, p := range []string{dir, filepath.Join(dir, arg)} {
					if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
						return fmt.Errorf("skills: %s is a symbolic link, not a folder of the workspace (a command may have made it); remove it and try again", p)
					}
				}
			}
			switch action {
			case "list":
				skills := agent.Skills(ws)
				if len(skills) == 0 {
					fmt.Fprintf(e.Stdout, "No skills in %s. Install one with 'perch skills install <folder with SKILL.md>'.\n", dir)
					return nil
				}
				for _, s := range skills {
					fmt.Fprintf(e.Stdout, "%-20s %s\n", s.Name, s.Summary)
				}
				return nil
			case "show":
				if !skillName().MatchString(arg) {
					return fmt.Errorf("skills: %q is not a skill name (see 'perch skills list')", arg)
				}
				data, err := os.ReadFile(filepath.Join(dir, arg, "SKILL.md"))
				if errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("skills: no skill %q in %s (see 'perch skills list')", arg, dir)
				} else if err != nil {
					return fmt.Errorf("skills: %w", err)
				}
				_, err = e.Stdout.Write(data)
				return err
			case "install":
				src := arg
				if fi, err := os.Stat(src); err != nil {
					return fmt.Errorf("skills: no folder %s to install from", src)
				} else if !fi.IsDir() {
					return fmt.Errorf("skills: %s is a file; give the folder that holds SKILL.md", src)
				}
				if _, err := os.Stat(filepath.Join(src, "SKILL.md")); err != nil {
					return fmt.Errorf("skills: %s has no SKILL.md; a skill is a folder with a SKILL.md describing when and how to use it", src)
				}
				name := name
				fix := "choose another --name"
				if name == "" {
					abs, _ := filepath.Abs(src)
					name = filepath.Base(abs)
					fix = "the folder's name is used; pass --name to choose one"
				}
				if !skillName().MatchString(name) {
					return fmt.Errorf("skills: %q is not a valid skill name (lower-case letters, digits, . _ -); %s", name, fix)
				}
				dst := filepath.Join(dir, name)
				_, err := os.Stat(dst)
				exists := err == nil
				if exists && !replace {
					return fmt.Errorf("skills: %s exists; replace it with 'perch skills install %s --replace', or remove it first with 'perch skills remove %s'", dst, src, name)
				}
				tmp := dst + ".installing"
				os.RemoveAll(tmp)
				if err := os.CopyFS(tmp, os.DirFS(src)); err != nil {
					os.RemoveAll(tmp)
					return fmt.Errorf("skills: copy %s: %w", src, err)
				}
				old := dst + ".replaced"
				if exists {
					// Moved aside, not deleted, until the new one is in:
					// a failure leaves a skill in place either way.
					os.RemoveAll(old)
					if err := os.Rename(dst, old); err != nil {
						os.RemoveAll(tmp)
						return fmt.Errorf("skills: %w", err)
					}
				}
				if err := os.Rename(tmp, dst); err != nil {
					os.RemoveAll(tmp)
					if exists {
						os.Rename(old, dst)
					}
					return fmt.Errorf("skills: %w", err)
				}
				verb := "Installed"
				if exists {
					os.RemoveAll(old)
					verb = "Replaced"
				}
				fmt.Fprintf(e.Stdout, "%s skill %s in %s\n", verb, name, dst)
				return nil
			case "remove":
				if !skillName().MatchString(arg) {
					return fmt.Errorf("skills: %q is not a skill name (see 'perch skills list')", arg)
				}
				p := filepath.Join(dir, arg)
				if _, err := os.Stat(filepath.Join(p, "SKILL.md")); err != nil {
					return fmt.Errorf("skills: no skill %q in %s", arg, dir)
				}
				if err := os.RemoveAll(p); err != nil {
					return fmt.Errorf("skills: %w", err)
				}
				fmt.Fprintf(e.Stdout, "Removed skill %s\n", arg)
				return nil
			}
			return fmt.Errorf("skills: unknown action %q; use list, show, install or remove", action)
		},
	}
}
