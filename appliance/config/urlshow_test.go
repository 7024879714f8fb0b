package config

import (
	"strings"
	"testing"
)

// TestAURLsPasswordStaysOutOfErrors: a proxy or API base refused at load
// is quoted in the error, which the gateway logs (the journal) and the CLI
// prints; the password a URL carries must not be in it, whatever is wrong
// with the URL.
func TestAURLsPasswordStaysOutOfErrors(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"proxy scheme", `{"providers":{"openai":{"proxy":"ftp://bob:s3cretpw@proxy.lan:3128"}}}`, "must start with http://"},
		{"proxy escape", `{"providers":{"openai":{"proxy":"http://bob:s3cretpw@proxy.lan:3128/%zz"}}}`, `invalid URL escape "%zz"`},
		{"proxy no host", `{"providers":{"openai":{"proxy":"http://bob:s3cretpw@"}}}`, "has no host"},
		{"api_base scheme", `{"providers":{"openai":{"api_base":"ftp://bob:s3cretpw@llm.lan/v1"}}}`, "must start with http://"},
		{"api_base escape", `{"providers":{"openai":{"api_base":"https://bob:s3cretpw@llm.lan/%zz"}}}`, "invalid URL escape"},
		{"channel api_base", `{"channels":{"slack":{"api_base":"https://bob:s3cretpw@slack.lan/%zz"}}}`, "channels.slack.api_base"},
		// A password with / ? or # does not parse, and the parser's
		// words quoted a piece of it ("invalid port \":s3cret\"").
		{"slash in the password", `{"providers":{"openai":{"proxy":"http://bob:s3cretpw/x@proxy.lan:3128"}}}`, "%2F"},
		{"hash in the password", `{"providers":{"openai":{"api_base":"https://bob:s3cretpw#x@llm.lan/v1"}}}`, "%23"},
		{"question mark", `{"tools":{"web":{"search":{"api_base":"https://bob:s3cretpw?@search.lan"}}}}`, "tools.web.search.api_base"},
		// Without a scheme, the user reads as the scheme and the rest as
		// opaque, which url.URL.Redacted shows as it is.
		{"no scheme", `{"providers":{"openai":{"proxy":"bob:s3cretpw@proxy.lan:3128"}}}`, "must start with http://"},
		// These parse: the password's # or / made the rest a fragment or
		// a path, and its start the port of a host named bob.
		{"parses with a fragment", `{"providers":{"openai":{"api_base":"https://bob:1234#s3cretpw@llm.lan/v1"}}}`, "outside its user part"},
		{"parses with a path", `{"providers":{"openai":{"proxy":"http://bob:8080/s3cretpw@proxy.lan:3128"}}}`, "outside its user part"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(Options{Path: writeConfig(t, c.body), Env: noEnv})
			if err == nil {
				t.Fatal("loaded without error")
			}
			if strings.Contains(err.Error(), "s3cretpw") {
				t.Errorf("the error shows the URL's password: %v", err)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bob:xxxxx@") {
				t.Errorf("error %q does not say %q with the URL's user (bob:xxxxx@)", err, c.want)
			}
		})
	}
}

// TestAnEnvironmentVariablesURLPasswordStaysOut: the same for a value set
// from the environment, which the error names.
func TestAnEnvironmentVariablesURLPasswordStaysOut(t *testing.T) {
	_, err := Load(Options{Path: writeConfig(t, `{}`), Env: envMap(map[string]string{"PERCH_PROVIDERS_OPENAI_PROXY": "bob:s3cretpw@proxy:3128"})})
	if err == nil || strings.Contains(err.Error(), "s3cretpw") || !strings.Contains(err.Error(), "PERCH_PROVIDERS_OPENAI_PROXY") {
		t.Fatalf("error %v; want it naming the variable without the password", err)
	}
}

func TestShowURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://bob:pw@proxy:3128":       "http://bob:xxxxx@proxy:3128",
		"http://bob@proxy:3128":          "http://xxxxx@proxy:3128", // a user name alone may be a key
		"http://proxy:3128":              "http://proxy:3128",
		"http://bob:pw@proxy:3128/%zz":   "http://bob:xxxxx@proxy:3128/%zz",
		"http://bob:p@w@proxy/%zz#x@y":   "http://bob:xxxxx@y", // more hidden than need be
		"not a url at all %zz":           "not a url at all %zz",
		"socks5://u:%zz@proxy:1080":      "socks5://u:xxxxx@proxy:1080",
		"https://llm.lan/v1?key=a:b@c/d": "https://llm.lan/v1?key=a:xxxxx@c/d", // more hidden than need be
		"http://bob:p/w@proxy:3128":      "http://bob:xxxxx@proxy:3128",
		"http://bob:p?w#x@proxy:3128/a":  "http://bob:xxxxx@proxy:3128/a",
		"bob:pw@proxy:3128":              "bob:xxxxx@proxy:3128",
		"https://bob:1234#x@llm.lan/v1":  "https://bob:xxxxx@llm.lan/v1",
		"https://sk-token@llm.lan/v1":    "https://xxxxx@llm.lan/v1",
		"https://sk-token@llm.lan/%zz":   "https://xxxxx@llm.lan/%zz",
	} {
		if got := ShowURL(in); got != want {
			t.Errorf("ShowURL(%q) = %q, want %q", in, got, want)
		}
	}
	if p := URLSecret("http://bob:pw%40x@proxy:3128"); p != "pw@x" {
		t.Errorf("URLSecret = %q, want pw@x", p)
	}
	if p := URLSecret("https://sk-token@llm.lan/v1"); p != "sk-token" {
		t.Errorf("URLSecret of a user name alone = %q, want it", p)
	}
	if p := URLSecret("http://proxy:3128"); p != "" {
		t.Errorf("URLSecret of a URL without one = %q", p)
	}
}
