package web_test

// Browser tests: a real gateway in-process (appliancetest: the composition
// root of `perch gateway`) against a loopback fake provider, driven through
// headless Chromium as a person would use the page.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/perchhq/perch/appliance/appliancetest"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

const browserToken = "tok-BROWSER-5150"

func gatewayConfig(providerBase string) map[string]any {
	cfg := map[string]any{"gateway": map[string]any{"host": "127.0.0.1", "port": 0, "api_token": browserToken}}
	if providerBase != "" {
		cfg["providers"] = map[string]any{"openrouter": map[string]any{"api_key": "sk-browser", "api_base": providerBase}}
		cfg["agents"] = map[string]any{"defaults": map[string]any{"model": "openai/gpt-4o-mini"}}
	}
	return cfg
}

// browser starts headless Chromium with the flags of PLATFORM.md and a
// fresh profile, and fails the test on any script error or console error
// (a CSP violation is one).
func browser(t *testing.T) context.Context {
	t.Helper()
	return browserWith(t, nil)
}

// browserWith is browser with more Chromium flags, tolerating the console
// errors tolerate accepts (a hostile page's refused requests are expected).
func browserWith(t *testing.T, tolerate func(*log.Entry) bool, flags ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		path, err = exec.LookPath("/usr/bin/chromium")
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed; run .ci/deps (apt-get install chromium)")
		}
		t.Skip("chromium is not installed (apt-get install chromium); CI runs this test")
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		// Chromium makes its singleton socket's directory under TMPDIR and,
		// killed at the end of a test, never removes it: /tmp gained one
		// per browser, ~30 a run.
		chromedp.Env("TMPDIR=" + t.TempDir()),
		chromedp.WindowSize(1200, 800),
	}, flags...)...)
	ctx, cancel := chromedp.NewContext(actx)
	var mu sync.Mutex
	var problems []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			problems = append(problems, "script error: "+ev.ExceptionDetails.Text+" "+describe(ev.ExceptionDetails.Exception))
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError && !expectedHTTPError(ev.Entry) && (tolerate == nil || !tolerate(ev.Entry)) {
				problems = append(problems, fmt.Sprintf("console %s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	}); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			t.Errorf("browser: %s", p)
		}
	})
	return ctx
}

// expectedHTTPError: the page gets 401, 403 and 503 from the API on purpose
// (token prompt, wrong code, no provider), and 400 for a schedule the
// gateway refuses; Chromium logs each as a network error.
func expectedHTTPError(e *log.Entry) bool {
	return e.Source == log.EntrySourceNetwork && (regexp.MustCompile(`status of (401|403|503)`).MatchString(e.Text) ||
		strings.Contains(e.Text, "status of 400") && regexp.MustCompile(`/admin/cron(/preview\?.*)?$`).MatchString(e.URL))
}

func describe(o *runtime.RemoteObject) string {
	if o == nil {
		return ""
	}
	return o.Description
}

// step runs actions with a deadline, so a page that never shows what the
// test waits for fails in seconds instead of hanging.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// waitFor polls a JavaScript predicate until it holds.
func waitFor(t *testing.T, ctx context.Context, what, predicate string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := chromedp.Run(sctx, chromedp.Poll[chromedp.Void](predicate)); err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, predicate, err)
	}
}

// giveToken enters the token when the page asks for it: at once, since
// the dashboard's panels need it.
func giveToken(t *testing.T, ctx context.Context) {
	t.Helper()
	step(t, ctx, "enter the token when asked",
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), browserToken),
		chromedp.Click(chromedp.ID("token-save")),
		// The page tries the token with one request before it closes the
		// dialog, which is modal: a click meanwhile would not reach the
		// page behind it.
		chromedp.WaitNotVisible(chromedp.ID("token-dialog")),
	)
}

// sendMessage types a message and sends it.
func sendMessage(t *testing.T, ctx context.Context, message string) {
	t.Helper()
	step(t, ctx, "send a message",
		chromedp.WaitVisible(chromedp.ID("message")),
		chromedp.SendKeys(chromedp.ID("message"), message),
		chromedp.Click(chromedp.ID("send")),
	)
}

// TestBrowserChatAndCanvas: a message goes out, the model's reply comes back
// as text even when it holds markup, and its canvas call draws a node.
func TestBrowserChatAndCanvas(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	fake.Enqueue(
		providertest.Reply{ToolCalls: []providertest.ToolCall{{Name: "canvas",
			Args: `{"action":"create_node","type":"code","title":"Snippet","content":"print(\"hi\")"}`}}},
		providertest.Reply{Content: "Done. <img src=x onerror=\"document.title='pwned'\">\n```\nfmt.Println(1)\n```"},
	)
	g := appliancetest.Start(t, gatewayConfig(fake.Base()), nil)
	base := g.URL
	ctx := browser(t)
	step(t, ctx, "load the page", chromedp.Navigate(base+"/"))
	// Without the token /ready tells the page only that the board is ready.
	waitFor(t, ctx, "the public ready state", `document.getElementById('state').textContent === 'ready'`)
	giveToken(t, ctx)
	waitFor(t, ctx, "the model, shown with the token", `document.getElementById('state').textContent.includes('ready · openai/gpt-4o-mini')`)

	sendMessage(t, ctx, "show me code")
	waitFor(t, ctx, "the reply", `document.querySelectorAll('#log .msg.agent').length === 1`)

	reply := eval[string](t, ctx, `document.querySelector('#log .msg.agent').textContent`)
	if !strings.Contains(reply, `Done. <img src=x onerror="document.title='pwned'">`) || !strings.Contains(reply, "fmt.Println(1)") {
		t.Errorf("reply shown as %q", reply)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#log img').length`); n != 0 {
		t.Errorf("the reply's markup became %d <img> elements", n)
	}
	if code := eval[string](t, ctx, `document.querySelector('#log .msg.agent pre code').textContent`); code != "fmt.Println(1)" {
		t.Errorf("fenced block shown as %q", code)
	}
	if title := eval[string](t, ctx, `document.title`); title != "Perch" {
		t.Errorf("document.title = %q: the reply ran script", title)
	}
	if got := eval[string](t, ctx, `localStorage.getItem('perch.token')`); got != browserToken {
		t.Errorf("stored token %q", got)
	}

	// The canvas node from ui_commands.
	waitFor(t, ctx, "the canvas node", `document.querySelector('#canvas article.node-code') !== null`)
	if title := eval[string](t, ctx, `document.querySelector('#canvas article.node-code h3').textContent`); title != "Snippet" {
		t.Errorf("canvas node title %q", title)
	}
	if code := eval[string](t, ctx, `document.querySelector('#canvas article.node-code code').textContent`); code != `print("hi")` {
		t.Errorf("canvas node code %q", code)
	}

	// The turn ran in the page's chat: the session web:home, on the web
	// channel, so what Perch sends later comes back to this page.
	info, err := g.Sys.Store.Session("web:home")
	if err != nil || info.Count == 0 || info.Channel != "web" || info.ChatID != "home" {
		t.Errorf("page session web:home = %+v, %v", info, err)
	}
	if got := eval[string](t, ctx, `localStorage.getItem('perch.chat')`); got != "home" {
		t.Errorf("the page's chat is %q", got)
	}

	// The System panel reads the same readiness as the header.
	step(t, ctx, "open the System panel", chromedp.Click(chromedp.ID("tab-system")))
	waitFor(t, ctx, "the figures", `document.getElementById('figures').textContent.includes('openrouter, openai/gpt-4o-mini')`)
	if txt := eval[string](t, ctx, `document.getElementById('ready-list').textContent`); !strings.Contains(txt, "Language model") || !strings.Contains(txt, "Database") {
		t.Errorf("readiness panel shows %q", txt)
	}

	// A reload keeps the conversation (from the board) and the canvas
	// (from this browser).
	step(t, ctx, "reload", chromedp.Navigate(base+"/"))
	waitFor(t, ctx, "the restored transcript", `document.querySelectorAll('#log .msg.agent').length === 1 && document.querySelectorAll('#log .msg.user').length === 1 && document.querySelector('#canvas article.node-code') !== null`)
}

// TestBrowserFirstRunSetup: a gateway without a provider shows the setup
// form; a wrong code is refused with the server's message, the code from the
// log connects the provider and brings the API token with it, so chat works
// without a restart and without asking for a second secret.
func TestBrowserFirstRunSetup(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	g := appliancetest.Start(t, gatewayConfig(""), nil)
	base, code := g.URL, g.SetupCode(t)
	wrong := appliancetest.WrongCode(code)

	ctx := browser(t)
	step(t, ctx, "load the page; the setup form opens by itself",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.ID("setup-code")),
		chromedp.SendKeys(chromedp.ID("setup-code"), wrong),
		chromedp.SendKeys(chromedp.ID("setup-model"), "openai/gpt-4o-mini"),
		chromedp.SendKeys(chromedp.ID("setup-key"), "sk-from-the-page"),
		chromedp.SendKeys(chromedp.ID("setup-base"), fake.Base()),
		chromedp.Click(chromedp.ID("setup-save")),
	)
	waitFor(t, ctx, "the wrong-code message", `document.getElementById('setup-error').textContent.includes('wrong setup code')`)
	if n := eval[bool](t, ctx, `document.getElementById('notice-text').textContent.includes('No language model')`); !n {
		t.Error("the notice does not say that no model is connected")
	}

	eval[bool](t, ctx, `(document.getElementById('setup-code').value = '') === ''`)
	step(t, ctx, "enter the right code",
		chromedp.SendKeys(chromedp.ID("setup-code"), code),
		chromedp.Click(chromedp.ID("setup-save")),
		chromedp.WaitNotVisible(chromedp.ID("setup-dialog")),
	)
	waitFor(t, ctx, "the connected notice", `document.getElementById('notice-text').textContent.includes('Connected: openrouter, model openai/gpt-4o-mini')`)
	waitFor(t, ctx, "the ready state, with the token the setup handed over", `document.getElementById('state').textContent.includes('ready · openai/gpt-4o-mini')`)
	if got := eval[string](t, ctx, `localStorage.getItem('perch.token')`); got != browserToken {
		t.Errorf("the page holds token %q after the setup, want the gateway's", got)
	}

	sendMessage(t, ctx, "hello after setup")
	waitFor(t, ctx, "the reply", `document.querySelectorAll('#log .msg.agent').length === 1`)
	if open := eval[bool](t, ctx, `document.getElementById('token-dialog').open`); open {
		t.Error("the page asked for the token after a setup that handed it over")
	}
	if reply := eval[string](t, ctx, `document.querySelector('#log .msg.agent').textContent`); reply != "echo: hello after setup" {
		t.Errorf("reply %q", reply)
	}
	if got := fake.Requests()[0].Header.Get("Authorization"); got != "Bearer sk-from-the-page" {
		t.Errorf("provider got Authorization %q", got)
	}
	// Nothing the page holds knows the key or the code.
	if html := eval[string](t, ctx, `document.documentElement.outerHTML + JSON.stringify(localStorage)`); strings.Contains(html, "sk-from-the-page") || strings.Contains(html, code) {
		t.Error("the page keeps the API key or the setup code")
	}
}
