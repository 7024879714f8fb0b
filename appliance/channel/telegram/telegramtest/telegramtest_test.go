package telegramtest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestCheckHTMLAcceptsWhatTelegramAccepts(t *testing.T) {
	for _, tc := range []struct {
		in, shown string
		ok        bool
	}{
		{"<b>bold</b> &amp; <i>it</i>", "bold & it", true},
		{`<a href="https://x.io">x</a>`, "x", true},
		{`<pre><code class="language-go">a &lt; b</code></pre>`, "a < b", true},
		{"<b>unclosed", "", false},
		{"<b><i>crossed</b></i>", "", false},
		{"<div>no</div>", "", false},
		{"a < b", "", false},
		{"fish & chips", "", false},
		{"&#128512;", "😀", true},
	} {
		shown, err := CheckHTML(tc.in)
		if (err == nil) != tc.ok || (tc.ok && shown != tc.shown) {
			t.Errorf("CheckHTML(%q) = %q, %v; want ok=%v shown %q", tc.in, shown, err, tc.ok, tc.shown)
		}
	}
}

func call(t *testing.T, s *Server, method string, v url.Values) map[string]any {
	t.Helper()
	resp, err := http.PostForm(s.Base()+"/bot"+s.Token+"/"+method, v)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return out
}

func TestGetUpdatesConfirmsBelowTheOffset(t *testing.T) {
	s := New("1:t")
	defer s.Close()
	id := s.Add(Message{From: User{ID: 5, FirstName: "A"}, Text: "hi"})
	out := call(t, s, "getUpdates", url.Values{"timeout": {"0"}})
	if res := out["result"].([]any); len(res) != 1 {
		t.Fatalf("result %v", out)
	}
	call(t, s, "getUpdates", url.Values{"offset": {jsonNum(id + 1)}, "timeout": {"0"}})
	if s.Pending() != 0 || s.Confirmed() != id+1 {
		t.Errorf("pending %d, confirmed %d", s.Pending(), s.Confirmed())
	}
	s.SetConflict(true)
	if out := call(t, s, "getUpdates", nil); out["error_code"] != float64(409) {
		t.Errorf("conflict answer %v", out)
	}
}

func TestSendMessageLimitsAndMarkup(t *testing.T) {
	s := New("1:t")
	defer s.Close()
	if out := call(t, s, "sendMessage", url.Values{"chat_id": {"5"}, "text": {strings.Repeat("a", Limit+1)}}); out["ok"] != false {
		t.Errorf("overlong text accepted: %v", out)
	}
	if out := call(t, s, "sendMessage", url.Values{"chat_id": {"5"}, "text": {"<b>x"}, "parse_mode": {"HTML"}}); !strings.Contains(out["description"].(string), "can't parse entities") {
		t.Errorf("bad HTML: %v", out)
	}
	if out := call(t, s, "sendMessage", url.Values{"chat_id": {"5"}, "text": {"fine"}}); out["ok"] != true || len(s.Sent()) != 1 {
		t.Errorf("good message: %v", out)
	}
	resp, _ := http.PostForm(s.Base()+"/botWRONG/getMe", nil)
	if resp.StatusCode != 401 {
		t.Errorf("wrong token: %d", resp.StatusCode)
	}
	resp.Body.Close()
}

func jsonNum(n int64) string { b, _ := json.Marshal(n); return string(b) }
