package firstboot

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// System makes the changes first boot cannot make by writing files.
type System interface {
	// SetHostname sets the running kernel's host name (the files are
	// written already).
	SetHostname(name string) error
	// AddUser creates a login account with a locked password, its home
	// and its own group, in groups; an existing account is left as is.
	AddUser(ctx context.Context, root, name string, groups []string) error
	// SSHHostKeys makes the SSH host keys that are missing. Keys are made
	// on the board, never shipped in the image.
	SSHHostKeys(ctx context.Context, root string) error
}

// HostSystem is System on the running machine, through the kernel and
// Debian's own tools (useradd, ssh-keygen). With a Root other than "/" the
// tools work inside it, and the kernel's host name is left alone.
type HostSystem struct{}

// SetHostname calls sethostname(2).
func (HostSystem) SetHostname(name string) error {
	if err := unix.Sethostname([]byte(name)); err != nil {
		return fmt.Errorf("firstboot: set the host name: %w", err)
	}
	return nil
}

// AddUser runs useradd. Its default password field is "!": locked.
func (HostSystem) AddUser(ctx context.Context, root, name string, groups []string) error {
	if exists, err := hasUser(filepath.Join(root, "etc/passwd"), name); err != nil || exists {
		return err
	}
	args := []string{"--create-home", "--user-group", "--shell", "/bin/bash"}
	if len(groups) > 0 {
		args = append(args, "--groups", strings.Join(groups, ","))
	}
	if root != "/" {
		args = append(args, "--prefix", root)
	}
	return run(ctx, "useradd", append(args, "--", name)...)
}

// SSHHostKeys runs ssh-keygen -A, which makes each missing host key type.
func (HostSystem) SSHHostKeys(ctx context.Context, root string) error {
	args := []string{"-A"}
	if root != "/" {
		if err := os.MkdirAll(filepath.Join(root, "etc/ssh"), 0o755); err != nil {
			return fmt.Errorf("firstboot: %w", err)
		}
		args = append(args, "-f", root)
	}
	return run(ctx, "ssh-keygen", args...)
}

func hasUser(passwd, name string) (bool, error) {
	data, err := os.ReadFile(passwd)
	if err != nil {
		return false, fmt.Errorf("firstboot: %w", err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if n, _, _ := strings.Cut(l, ":"); n == name {
			return true, nil
		}
	}
	return false, nil
}

func run(ctx context.Context, prog string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("firstboot: %s %s: %w: %s", prog, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
