package discord

import "testing"

func TestStripMention(t *testing.T) {
	bot := readyUser{ID: "900", Username: "perch", GlobalName: "Perch Bot"}
	for _, c := range []struct {
		text       string
		meta, want bool
		out        string
	}{
		{"<@900> hi", false, true, "hi"},
		{"hi <@!900>", false, true, "hi"},
		{"listed in mentions only", true, true, "listed in mentions only"},
		{"@perch, lights off", false, true, "lights off"},
		{"@Perch Bot lights on", false, true, "lights on"},
		{"900 status", false, true, "status"},
		{"9000 is not the id", false, false, "9000 is not the id"},
		{"perch@example.com", false, false, "perch@example.com"},
		{"plain", false, false, "plain"},
		// A mention in code is shown as typed and notifies nobody.
		{"quote `<@900>` here", false, false, "quote `<@900>` here"},
		{"```\n@perch 900\n```", false, false, "```\n@perch 900\n```"},
		{"`<@900>` and <@900> hi", false, true, "`<@900>` and hi"},
		{"unclosed ` <@900> hi", false, true, "unclosed ` hi"},
	} {
		got, m := stripMention(c.text, newMentionPatterns(bot), c.meta)
		if got != c.out || m != c.want {
			t.Errorf("stripMention(%q) = %q, %v; want %q, %v", c.text, got, m, c.out, c.want)
		}
	}
}

// TestStripMentionWithoutFullIdentity: before READY there is nothing to
// strip; a bot without names is still found by its id.
func TestStripMentionWithoutFullIdentity(t *testing.T) {
	if got, m := stripMention(" <@900> hi ", nil, true); got != "<@900> hi" || !m {
		t.Errorf("no identity yet: %q, %v", got, m)
	}
	p := newMentionPatterns(readyUser{ID: "900"})
	if got, m := stripMention("@perch hi", p, false); got != "@perch hi" || m {
		t.Errorf("nameless bot, typed name: %q, %v", got, m)
	}
	if got, m := stripMention("900, hi", p, false); got != "hi" || !m {
		t.Errorf("nameless bot, bare id: %q, %v", got, m)
	}
}

// TestStripMentionCompilesNothingPerMessage: the patterns are compiled once
// per identity; a message costs no regexp compilation (it did, four per
// message).
func TestStripMentionCompilesNothingPerMessage(t *testing.T) {
	p := newMentionPatterns(readyUser{ID: "900", Username: "perch", GlobalName: "Perch Bot"})
	allocs := testing.AllocsPerRun(100, func() {
		stripMention("what is the temperature in the kitchen?", p, false)
	})
	// Matching takes its machines from regexp's sync.Pool, which the race
	// detector empties at random: a few allocations are those. Compiling
	// the patterns was over a hundred.
	if allocs > 8 {
		t.Errorf("stripMention allocates %.0f times for a message without a mention", allocs)
	}
}

func TestDiscordMarkdown(t *testing.T) {
	for in, want := range map[string]string{
		"__bold__ and *it*":           "**bold** and *it*",
		"`__init__` stays":            "`__init__` stays",
		"snake__case__word":           "snake__case__word",
		"#### Deep heading":           "**Deep heading**",
		"## Kept":                     "## Kept",
		"~~~\n__x__\n~~~":             "```\n__x__\n```",
		"```py\ndef __init__():\n```": "```py\ndef __init__():\n```",
		"~~~~md\n~~~\n__x__\n~~~~":    "````md\n~~~\n__x__\n````",
		"```\n__x__\n```go\n```":      "```\n__x__\n```go\n```",
	} {
		if got := discordMarkdown(in); got != want {
			t.Errorf("discordMarkdown(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAPIBase(t *testing.T) {
	if _, err := apiBase("discord.com/api"); err == nil {
		t.Error("an api_base without a scheme was accepted")
	}
	if u, err := apiBase("https://discord.com/api/v10/"); err != nil || u.String() != "https://discord.com/api/v10" {
		t.Errorf("api_base %v %v", u, err)
	}
}

func TestCutMarkup(t *testing.T) {
	for text, want := range map[string]string{
		"<@&7> hi":            "hi",
		"<@&7>, lights off":   "lights off",
		"lights on <@&7>":     "lights on",
		"a <@&7>: b <@&7> c":  "a b c",
		"<@&70> is not <@&7>": "<@&70> is not",
	} {
		if got := cutMarkup(text, "<@&7>"); got != want {
			t.Errorf("cutMarkup(%q) = %q, want %q", text, got, want)
		}
	}
}
