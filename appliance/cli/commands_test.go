package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/gateway/gatewaytest"

	"github.com/perchhq/perch/appliance/appliancetest"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// secretLines parses Status's "Secrets:" section into key -> state.
func secretLines(t *testing.T, out string) map[string]string {
	t.Helper()
	_, after, ok := strings.Cut(out, "Secrets:")
	if !ok {
		t.Fatalf("no Secrets section in:\n%s", out)
	}
	re := regexp.MustCompile(`^\s+(\S+)\s+(set|not set)\s*$`)
	m := map[string]string{}
	for _, ln := range strings.Split(after, "\n")[1:] {
		if strings.TrimSpace(ln) == "" {
			continue
		}
		sub := re.FindStringSubmatch(ln)
		if sub == nil {
			t.Errorf("secret line %q is not '<key> set|not set'", ln)
			continue
		}
		m[sub[1]] = sub[2]
	}
	return m
}

// Status shows each secret only as set / not set.
func TestStatusHidesSecrets(t *testing.T) {
	home := t.TempDir()
	t.Setenv("PERCH_HOME", home)
	const (
		apiKey = "sk-or-v1-0123456789abcdef"
		token  = "tok-9f8e7d6c5b4a"
		tgTok  = "123456:telegram-bot-token"
	)
	// The machine's environment must not decide what is set.
	t.Setenv("PERCH_PROVIDERS_GROQ_API_KEY", "")
	t.Setenv("PERCH_CHANNELS_SLACK_BOT_TOKEN", "")
	t.Setenv("PERCH_PROVIDERS_OPENROUTER_API_KEY", apiKey)
	t.Setenv("PERCH_GATEWAY_API_TOKEN", token)
	t.Setenv("PERCH_CHANNELS_TELEGRAM_TOKEN", tgTok)
	cfgPath := filepath.Join(home, "config.json")
	cfg := fmt.Sprintf(`{"gateway":{"host":"127.0.0.1","port":%d},"agents":{"defaults":{"model":"openai/gpt-4o-mini"}},
		"channels":{"telegram":{"enabled":true}}}`, gatewaytest.FreePort(t))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	text, errOut, code := runCLI(t, "status", "--config", cfgPath)
	if code != 0 {
		t.Fatalf("status exit %d: %s", code, errOut)
	}
	for _, secret := range []string{apiKey, token, tgTok, "telegram-bot-token", "0123456789abcdef"} {
		if strings.Contains(text, secret) {
			t.Errorf("status output reveals a secret (%q):\n%s", secret, text)
		}
	}
	got := secretLines(t, text)
	want := map[string]string{
		"providers.openrouter.api_key": "set",
		"gateway.api_token":            "set",
		"channels.telegram.token":      "set",
		"providers.groq.api_key":       "not set",
		"channels.slack.bot_token":     "not set",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s shows %q, want %q", k, got[k], v)
		}
	}
	for _, line := range []string{
		`Config:\s+` + regexp.QuoteMeta(cfgPath) + ` \(present\)`,
		`Workspace:\s+` + regexp.QuoteMeta(filepath.Join(home, "workspace")),
		`Provider:\s+openrouter, model openai/gpt-4o-mini`,
		`Channels:\s+web page, telegram\n`,
		`Gateway:\s+not running \(would listen on 127\.0\.0\.1:\d+\)`,
	} {
		if !regexp.MustCompile(line).MatchString(text) {
			t.Errorf("status lacks a line matching %s:\n%s", line, text)
		}
	}
	if !strings.Contains(text, "(not created yet)") {
		t.Errorf("a fresh config dir should show the database as not created yet:\n%s", text)
	}
}

// With the gateway running from the same config dir, status finds it
// through perch.pid and asks /ready.
func TestStatusFindsRunningGateway(t *testing.T) {
	fake := providertest.New()
	t.Cleanup(fake.Close)
	g := appliancetest.Start(t, map[string]any{"providers": map[string]any{"openai": map[string]any{"api_key": "k", "api_base": fake.Base()}},
		"agents": map[string]any{"defaults": map[string]any{"model": "gpt-4o-mini"}}}, nil) // sets PERCH_HOME
	out, errOut, code := runCLI(t, "status")
	if code != 0 {
		t.Fatalf("status exit %d: %s", code, errOut)
	}
	want := fmt.Sprintf("running (pid %d) at %s, ready", os.Getpid(), g.URL)
	if !strings.Contains(out, want) {
		t.Errorf("status lacks %q:\n%s", want, out)
	}
	// No chat platform is configured: the page is still a way in.
	if !regexp.MustCompile(`Channels:\s+web page only \(no chat platform enabled\)\n`).MatchString(out) {
		t.Errorf("status without platforms does not name the web page:\n%s", out)
	}
}

// skillsEnv sets up an empty config dir and returns the workspace.
func skillsEnv(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("PERCH_HOME", home)
	t.Setenv("PERCH_AGENTS_DEFAULTS_WORKSPACE", "")
	return filepath.Join(home, "workspace")
}

func skills(action, arg, name string, flags ...string) (string, error) {
	var out, errOut bytes.Buffer
	args := []string{action}
	if arg != "" {
		args = append(args, arg)
	}
	if name != "" {
		args = append(args, "--name", name)
	}
	args = append(args, flags...)
	c := skillsCommand()
	fs := flag.NewFlagSet("skills", flag.ContinueOnError)
	c.Flags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	e := &Env{Stdout: &out, Stderr: &errOut}
	err = c.Run(context.Background(), e, pos)
	return out.String(), err
}

// writeSkill makes a skill folder named name under dir.
func writeSkill(t *testing.T, dir, name, md string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Join(p, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if md != "" {
		if err := os.WriteFile(filepath.Join(p, "SKILL.md"), []byte(md), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(p, "scripts", "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSkillsLifecycle(t *testing.T) {
	ws := skillsEnv(t)
	src := t.TempDir()
	md := "---\nname: weather\ndescription: Fetch the forecast for the garden\n---\n# Weather\nUse web_fetch.\n"
	folder := writeSkill(t, src, "weather", md)

	out, err := skills("list", "", "")
	if err != nil || !strings.Contains(out, "No skills in") {
		t.Fatalf("empty list = %q, %v", out, err)
	}
	out, err = skills("install", folder, "")
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(ws, "skills", "weather")
	if !strings.Contains(out, "Installed skill weather") {
		t.Errorf("install said %q", out)
	}
	if data, err := os.ReadFile(filepath.Join(dst, "scripts", "run.sh")); err != nil || !strings.Contains(string(data), "echo hi") {
		t.Errorf("the folder's other files were not copied: %v", err)
	}
	if _, err := os.Stat(dst + ".installing"); err == nil {
		t.Error("the temporary install folder was left behind")
	}
	out, _ = skills("list", "", "")
	if !regexp.MustCompile(`weather\s+Fetch the forecast for the garden`).MatchString(out) {
		t.Errorf("list = %q, want the skill with its description", out)
	}
	out, err = skills("show", "weather", "")
	if err != nil || out != md {
		t.Errorf("show = %q, %v; want SKILL.md as is", out, err)
	}
	if _, err := skills("install", folder, ""); err == nil || !strings.Contains(err.Error(), "exists; replace it with 'perch skills install "+folder+" --replace'") {
		t.Errorf("second install = %v, want 'exists' and how to replace it", err)
	}
	// A new version replaces the installed one, files it no longer has
	// included.
	md2 := "---\nname: weather\ndescription: Fetch the forecast, now with rain\n---\n# Weather v2\n"
	v2 := writeSkill(t, t.TempDir(), "weather", md2)
	os.Remove(filepath.Join(v2, "scripts", "run.sh"))
	out, err = skills("install", v2, "", "--replace")
	if err != nil || !strings.Contains(out, "Replaced skill weather") {
		t.Fatalf("install --replace = %q, %v", out, err)
	}
	if out, _ := skills("show", "weather", ""); out != md2 {
		t.Errorf("after --replace show = %q", out)
	}
	if _, err := os.Stat(filepath.Join(dst, "scripts", "run.sh")); err == nil {
		t.Error("a file of the old version survived --replace")
	}
	if _, err := os.Stat(dst + ".replaced"); err == nil {
		t.Error("the old version was left beside the new one")
	}
	if _, err := skills("install", folder, "", "--replace"); err != nil {
		t.Fatal(err)
	}
	out, err = skills("install", folder, "weather-2")
	if err != nil || !strings.Contains(out, "weather-2") {
		t.Errorf("install under another name = %q, %v", out, err)
	}
	out, err = skills("remove", "weather", "")
	if err != nil || !strings.Contains(out, "Removed skill weather") {
		t.Errorf("remove = %q, %v", out, err)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Error("the removed skill is still there")
	}
	if _, err := skills("show", "weather", ""); err == nil || !strings.Contains(err.Error(), `no skill "weather"`) {
		t.Errorf("show after remove = %v", err)
	}
	if _, err := os.Stat(folder); err != nil {
		t.Errorf("install or remove touched the source folder: %v", err)
	}
}

func TestSkillsRefusals(t *testing.T) {
	ws := skillsEnv(t)
	src := t.TempDir()
	good := writeSkill(t, src, "good", "# Good\nA skill.\n")
	noMD := writeSkill(t, src, "nomd", "")
	badName := writeSkill(t, src, "Weather Tools", "# W\nx\n")
	// A skill-looking folder outside skills/ that a traversal would reach.
	outside := writeSkill(t, ws, "x", "# Outside\n")

	tests := []struct {
		name   string
		action string
		arg    string
		as     string
		want   string
	}{
		{"show traversal", "show", "../x", "", `"../x" is not a skill name`},
		{"show absolute", "show", "/etc", "", "is not a skill name"},
		{"remove traversal", "remove", "../x", "", `"../x" is not a skill name`},
		{"remove dot-dot", "remove", "..", "", "is not a skill name"},
		{"remove unknown", "remove", "ghost", "", `no skill "ghost"`},
		{"show unknown", "show", "ghost", "", `no skill "ghost"`},
		{"install traversal name", "install", good, "../x", `"../x" is not a valid skill name (lower-case letters, digits, . _ -); choose another --name`},
		{"install upper-case name", "install", good, "Good", "is not a valid skill name"},
		{"install without SKILL.md", "install", noMD, "", "has no SKILL.md"},
		{"install missing folder", "install", filepath.Join(src, "absent"), "", "no folder " + filepath.Join(src, "absent") + " to install from"},
		{"install a file", "install", filepath.Join(good, "SKILL.md"), "", "SKILL.md is a file; give the folder that holds SKILL.md"},
		{"install folder with a bad name", "install", badName, "", "the folder's name is used; pass --name to choose one"},
		{"unknown action", "publish", "good", "", `unknown action "publish"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := skills(tt.action, tt.arg, tt.as)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s %s = %v, want %q", tt.action, tt.arg, err, tt.want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "skills: ") {
				t.Errorf("error %q lacks the skills: prefix", err)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "SKILL.md")); err != nil {
		t.Errorf("a refused traversal touched %s: %v", outside, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(ws, "skills")); len(ents) != 0 {
		t.Errorf("refused installs left %d entries in skills/", len(ents))
	}
	// With --name the badly named folder installs.
	if _, err := skills("install", badName, "weather-tools"); err != nil {
		t.Errorf("install with --name = %v", err)
	}
}

// A link a command made in place of skills/ (or of a skill's folder) is
// not installed into or removed through: the CLI may run with sudo.
func TestSkillsRefuseLinksInTheWorkspace(t *testing.T) {
	ws := skillsEnv(t)
	good := writeSkill(t, t.TempDir(), "good", "# Good\nA skill.\n")
	elsewhere := t.TempDir()
	victim := writeSkill(t, elsewhere, "victim", "# Not a skill of this workspace\n")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(ws, "skills")); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{"install", good}, {"remove", "victim"}} {
		if _, err := skills(c[0], c[1], ""); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
			t.Errorf("%s through a linked skills/: %v", c[0], err)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "SKILL.md")); err != nil {
		t.Errorf("the folder behind the link lost its file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "good")); err == nil {
		t.Error("a skill was installed through the link")
	}
	os.Remove(filepath.Join(ws, "skills"))
	os.MkdirAll(filepath.Join(ws, "skills"), 0o755)
	if err := os.Symlink(victim, filepath.Join(ws, "skills", "victim")); err != nil {
		t.Fatal(err)
	}
	if _, err := skills("remove", "victim", ""); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("remove of a linked skill folder: %v", err)
	}
	if _, err := os.Stat(filepath.Join(victim, "SKILL.md")); err != nil {
		t.Errorf("the folder behind the link lost its file: %v", err)
	}
}

// runCLI runs the command line args in-process and returns stdout, stderr
// and the exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut}
	code := Run(context.Background(), e, args)
	return out.String(), errOut.String(), code
}

// TestFlagErrorsInTheWordsTyped: a flag the command lacks, one without its
// value and a bad boolean are said with the flag as typed (--name, not the
// flag package's -name), and a flag the command lacks with its usage.
func TestFlagErrorsInTheWordsTyped(t *testing.T) {
	home(t)
	for args, want := range map[string]string{
		"agent --bogus x":              "agent: unknown flag --bogus (usage: perch agent [-m MESSAGE] [-s SESSION] [--debug]); see 'perch agent --help'",
		"status --bogus":               "status: unknown flag --bogus; see 'perch status --help'",
		"cron add --message x --every": "cron: --every needs a value; see 'perch cron --help'",
		"cron list --json=maybe":       `cron: --json takes true or false, not "maybe"; see 'perch cron --help'`,
	} {
		_, stderr, code := runCLI(t, strings.Fields(args)...)
		if code != 1 || strings.TrimSpace(stderr) != "perch: "+want {
			t.Errorf("perch %s: exit %d, %q\nwant %q", args, code, stderr, "perch: "+want)
		}
	}
}
