package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/tools"
	"github.com/perchhq/perch/appliance/wsfile"
)

// Workspace files read into the system prompt, in this order.
var promptFiles = []string{"AGENT.md", "IDENTITY.md", "USER.md", "memory/MEMORY.md"}

// privatePromptFiles are about the owner: they are left out of the prompt
// of a turn for a sender nobody vouched for, who could otherwise ask the
// model what it knows about its owner.
var privatePromptFiles = map[string]bool{"USER.md": true, "memory/MEMORY.md": true}

// maxPromptFile caps each file so a runaway memory file cannot eat the
// model's context.
const maxPromptFile = 16 << 10

// promptBuilder assembles the system prompt. The workspace part is cached and
// rebuilt when a file's modification time changes, checked at most once a
// second: a turn should not cost a handful of stat calls.
type promptBuilder struct {
	dir string

	mu        sync.Mutex
	checked   time.Time
	stamp     string
	static    string
	toolCount int
	toolText  string
	head      string // static + toolText, made once for both
	// public and publicHead are static and head without the private
	// files, made when a restricted turn first needs them.
	public, publicHead string
}

func newPromptBuilder(dir string) *promptBuilder { return &promptBuilder{dir: dir} }

func (b *promptBuilder) build(reg *tools.Registry, in bus.Inbound, key string) string {
	head, tail := b.parts(reg, in, key)
	return head + tail
}

// parts returns the system prompt as its head, the workspace files and the
// tool summaries (one string, the same from turn to turn until one of them
// changes, so the provider client can keep its encoding), and its tail,
// this turn's time, session and wishes.
func (b *promptBuilder) parts(reg *tools.Registry, in bus.Inbound, key string) (head, tail string) {
	b.mu.Lock()
	if time.Since(b.checked) > time.Second {
		b.checked = time.Now()
		if st := b.fileStamp(); st != b.stamp || b.static == "" {
			b.stamp = st
			b.static = b.readStatic(true)
			b.head, b.public, b.publicHead = "", "", ""
		}
	}
	if n := reg.Count(); n != b.toolCount || b.toolText == "" {
		b.toolCount = n
		b.toolText = "## Tools\n" + strings.Join(reg.Summaries(), "\n") + "\n"
		b.head, b.publicHead = "", ""
	}
	if in.RestrictTools {
		if b.public == "" {
			b.public = b.readStatic(false)
		}
		if b.publicHead == "" {
			b.publicHead = b.public + b.toolText
		}
		head = b.publicHead
	} else {
		if b.head == "" {
			b.head = b.static + b.toolText
		}
		head = b.head
	}
	b.mu.Unlock()

	// Written piece by piece rather than with fmt: this runs every turn,
	// and the builder is sized once for the whole prompt.
	var sb strings.Builder
	sb.Grow(128 + len(key) + len(in.Channel) + len(in.ChatID))
	now := time.Now()
	var stamp [48]byte
	sb.WriteString("\n## Now\nTime: ")
	sb.Write(now.AppendFormat(stamp[:0], "2006-01-02 15:04 MST"))
	sb.WriteString(" (")
	sb.WriteString(now.Weekday().String())
	sb.WriteString(")\nSession: ")
	sb.WriteString(key)
	sb.WriteString(" (channel ")
	sb.WriteString(in.Channel)
	if in.ChatID != "" {
		sb.WriteString(", chat ")
		sb.WriteString(in.ChatID)
	}
	sb.WriteString(")\n")
	if t := in.Metadata["media_type"]; t != "" {
		// POST /chat's media_config: the client wants generated media.
		fmt.Fprintf(&sb, "The user asks for generated media: type %s", t)
		if v := in.Metadata["media_size"]; v != "" {
			fmt.Fprintf(&sb, ", size %s", v)
		}
		if v := in.Metadata["media_aspect_ratio"]; v != "" {
			fmt.Fprintf(&sb, ", aspect ratio %s", v)
		}
		sb.WriteString("; for images use generate_image with these settings.\n")
	}
	return head, sb.String()
}

// fileStamp summarises the prompt files' and skills' modification times.
func (b *promptBuilder) fileStamp() string {
	var sb strings.Builder
	for _, f := range append(promptFiles, "skills") {
		if st, err := os.Stat(filepath.Join(b.dir, filepath.FromSlash(f))); err == nil {
			fmt.Fprintf(&sb, "%s:%d:%d;", f, st.ModTime().UnixNano(), st.Size())
		}
	}
	if ents, err := os.ReadDir(filepath.Join(b.dir, "skills")); err == nil {
		for _, e := range ents {
			if st, err := os.Stat(filepath.Join(b.dir, "skills", e.Name(), "SKILL.md")); err == nil {
				fmt.Fprintf(&sb, "%s:%d;", e.Name(), st.ModTime().UnixNano())
			}
		}
	}
	return sb.String()
}

// readStatic reads the workspace part of the prompt, with the files about
// the owner when private is set.
func (b *promptBuilder) readStatic(private bool) string {
	var sb strings.Builder
	sb.WriteString("You are Perch, an AI agent running on a small Linux board. You answer chat messages, " +
		"use tools to act, and keep answers short and plain.\n")
	fmt.Fprintf(&sb, "Your workspace is %s; file tools and shell commands work inside it.\n\n", b.dir)
	for _, f := range promptFiles {
		if privatePromptFiles[f] && !private {
			continue
		}
		// Commands write in the workspace: wsfile keeps a link to the
		// config (or anything outside), a FIFO or a huge file out.
		data, cut, err := wsfile.Read(b.dir, f, maxPromptFile)
		if err != nil || len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		text := string(data)
		if cut {
			text += "\n[truncated]"
		}
		fmt.Fprintf(&sb, "## %s\n%s\n\n", f, strings.TrimSpace(text))
	}
	if skills := Skills(b.dir); len(skills) > 0 {
		sb.WriteString("## Skills\nRead a skill's SKILL.md with read_file before using it.\n")
		for _, s := range skills {
			fmt.Fprintf(&sb, "- %s (skills/%s/SKILL.md): %s\n", s.Name, s.Name, s.Summary)
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// Skill is a folder under workspace/skills with a SKILL.md.
type Skill struct {
	Name    string
	Summary string
	Path    string
}

// Skills lists the workspace's skills, sorted by name.
func Skills(workspace string) []Skill {
	dir := filepath.Join(workspace, "skills")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []Skill
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name(), "SKILL.md")
		data, _, err := wsfile.Read(workspace, "skills/"+e.Name()+"/SKILL.md", maxPromptFile)
		if err != nil {
			continue
		}
		out = append(out, Skill{Name: e.Name(), Summary: skillSummary(string(data)), Path: p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// skillSummary is the front matter's description, else the first text line.
func skillSummary(md string) string {
	lines := strings.Split(md, "\n")
	if len(lines) > 0 && strings.TrimSpace(lines[0]) == "---" {
		for _, ln := range lines[1:] {
			if strings.TrimSpace(ln) == "---" {
				break
			}
			if k, v, ok := strings.Cut(ln, ":"); ok && strings.TrimSpace(k) == "description" {
				return strings.Trim(strings.TrimSpace(v), `"'`)
			}
		}
	}
	inFront := len(lines) > 0 && strings.TrimSpace(lines[0]) == "---"
	for i, ln := range lines {
		t := strings.TrimSpace(ln)
		if inFront {
			if i > 0 && t == "---" {
				inFront = false
			}
			continue
		}
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if len(t) > 160 {
			t = t[:160] + "…"
		}
		return t
	}
	return ""
}
