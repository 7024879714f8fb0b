package slack

import (
	"encoding/json"
	"testing"
)

func TestStripMention(t *testing.T) {
	bot := botIdentity{UserID: "UBOT", Name: "perch"}
	for _, c := range []struct {
		text     string
		blocks   bool
		want     string
		mentions bool
	}{
		{"<@UBOT> hi", false, "hi", true},
		{"hey <@UBOT|perch>, status?", false, "hey status?", true},
		{"<@UBOT> ```\n    indented\n```", false, "```\n    indented\n```", true},
		{"rich text only", true, "rich text only", true},
		{"@perch: water the plants", false, "water the plants", true},
		{"ask @Perch now", false, "ask now", true},
		{"@perch look:  two  spaces", false, "look:  two  spaces", true},
		{"email perch@example.com", false, "email perch@example.com", false},
		{"@perchance not me", false, "@perchance not me", false},
		{"UBOT reboot", false, "reboot", true},
		{"UBOTX is someone else", false, "UBOTX is someone else", false},
		{"nothing here", false, "nothing here", false},
	} {
		got, m := stripMention(c.text, newMentionPatterns(bot), c.blocks)
		if got != c.want || m != c.mentions {
			t.Errorf("stripMention(%q) = %q, %v; want %q, %v", c.text, got, m, c.want, c.mentions)
		}
	}
}

// TestStripMentionWithoutFullIdentity: before auth.test has answered there
// is nothing to strip; a bot without a name is still found by its id.
func TestStripMentionWithoutFullIdentity(t *testing.T) {
	if got, m := stripMention("  <@UBOT> hi ", nil, true); got != "<@UBOT> hi" || !m {
		t.Errorf("no identity yet: %q, %v", got, m)
	}
	p := newMentionPatterns(botIdentity{UserID: "UBOT"})
	if got, m := stripMention("@perch hi", p, false); got != "@perch hi" || m {
		t.Errorf("nameless bot, typed name: %q, %v", got, m)
	}
	if got, m := stripMention("<@UBOT> hi", p, false); got != "hi" || !m {
		t.Errorf("nameless bot, markup: %q, %v", got, m)
	}
}

// TestStripMentionCompilesNothingPerMessage: the patterns are compiled once
// per identity; a message costs no regexp compilation (it did, three per
// message, ~15 KB of garbage each time).
func TestStripMentionCompilesNothingPerMessage(t *testing.T) {
	p := newMentionPatterns(botIdentity{UserID: "UBOT", Name: "perch"})
	allocs := testing.AllocsPerRun(100, func() {
		stripMention("what is the temperature in the kitchen?", p, false)
	})
	// Matching takes its machines from regexp's sync.Pool, which the race
	// detector empties at random: a few allocations are those. Compiling
	// the three patterns was over a hundred.
	if allocs > 8 {
		t.Errorf("stripMention allocates %.0f times for a message without a mention", allocs)
	}
}

func TestMentionedInBlocks(t *testing.T) {
	raw := json.RawMessage(`[{"type":"rich_text","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"hi "},{"type":"user","user_id":"UBOT"}]}]}]`)
	if !mentionedInBlocks(raw, "UBOT") || mentionedInBlocks(raw, "UOTHER") || mentionedInBlocks(nil, "UBOT") {
		t.Error("rich_text user elements not read right")
	}
}

func TestPlainIncoming(t *testing.T) {
	for in, want := range map[string]string{
		"see <https://x.io/a?b=1&amp;c=2|the page>": "see the page (https://x.io/a?b=1&c=2)",
		"<https://x.io>":                       "https://x.io",
		"ask <@U123> in <#C9|general>":         "ask @U123 in #general",
		"<!here> 3 &lt; 4 &amp;&amp; 5 &gt; 4": "@here 3 < 4 && 5 > 4",
		"<mailto:a@b.c|a@b.c>":                 "a@b.c (mailto:a@b.c)",
	} {
		if got := plainIncoming(in); got != want {
			t.Errorf("plainIncoming(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClassifyAndAPIBase(t *testing.T) {
	if _, err := apiBase("ftp://x"); err == nil {
		t.Error("ftp api_base accepted")
	}
	if u, err := apiBase("http://127.0.0.1:9/api"); err != nil || u.String() != "http://127.0.0.1:9/api/" {
		t.Errorf("api_base without its slash: %v %v", u, err)
	}
	if u, _ := apiBase(""); u.String() != DefaultAPIBase {
		t.Errorf("default api_base %v", u)
	}
}
