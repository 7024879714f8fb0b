package web_test

// Browser tests of the chat as a person uses it on a phone and a laptop:
// what a message looks like, where a reply goes, and what the page does
// while Perch is slow to answer.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/perchhq/perch/appliance/appliancetest"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// chatPage is a gateway with a fake provider and the page open on it at
// one width, the token given.
type chatPage struct {
	g    *appliancetest.Gateway
	fake *providertest.Server
	ctx  context.Context
}

// openChat opens it; scripts run in the page before its own, in every
// document it loads.
func openChat(t *testing.T, w int, scripts ...string) *chatPage {
	t.Helper()
	fake := providertest.New()
	t.Cleanup(fake.Close)
	return openChatOn(t, w, fake, fake.Base(), scripts...)
}

func openChatOn(t *testing.T, w int, fake *providertest.Server, base string, scripts ...string) *chatPage {
	t.Helper()
	g := appliancetest.Start(t, gatewayConfig(base), nil)
	ctx := browser(t)
	for _, src := range scripts {
		if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: src}); err != nil {
			t.Fatal(err)
		}
	}
	step(t, ctx, "load the page", viewport(w), chromedp.Navigate(g.URL+"/"))
	giveToken(t, ctx)
	waitFor(t, ctx, "the live stream and the ready state", `document.getElementById('state').textContent.startsWith('ready · ')`)
	return &chatPage{g: g, fake: fake, ctx: ctx}
}

// TestBrowserBackticksKeepTheirLine: ``` inside a sentence is text and a
// pair on one line is inline code, in the person's own message and in the
// reply; a fence at the start of a line is still a code block. The words
// after ``` were taken for a language tag and dropped.
func TestBrowserBackticksKeepTheirLine(t *testing.T) {
	for _, w := range widths {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			p := openChat(t, w)
			ctx := p.ctx
			const how = "type ``` before and after the code. Then press Enter"
			p.fake.Enqueue(providertest.Reply{Content: how})
			sendMessage(t, ctx, how)
			waitFor(t, ctx, "the reply", `document.querySelectorAll('#log .msg.agent').length === 1`)
			for _, who := range []string{"user", "agent"} {
				if got := eval[string](t, ctx, `document.querySelector('#log .msg.`+who+`').textContent`); got != how {
					t.Errorf("the %s's message shows %q, want %q", who, got, how)
				}
				if n := eval[int](t, ctx, `document.querySelectorAll('#log .msg.`+who+` pre').length`); n != 0 {
					t.Errorf("the %s's message has %d code boxes", who, n)
				}
			}

			p.fake.Enqueue(providertest.Reply{Content: "Run ```ls -la /tmp``` to list it, or:\n```sh\nls -l\n```\nthen `cd` there."})
			sendMessage(t, ctx, "how do I list /tmp?")
			waitFor(t, ctx, "the second reply", `document.querySelectorAll('#log .msg.agent').length === 2`)
			last := `[...document.querySelectorAll('#log .msg.agent')].pop()`
			if got := eval[string](t, ctx, last+`.querySelector('p').textContent`); got != "Run ls -la /tmp to list it, or:" {
				t.Errorf("the first line shows %q", got)
			}
			if got := eval[[]string](t, ctx, `[...`+last+`.querySelectorAll('p code')].map(c => c.textContent)`); strings.Join(got, "|") != "ls -la /tmp|cd" {
				t.Errorf("inline code %q", got)
			}
			if got := eval[string](t, ctx, last+`.querySelector('pre code').textContent`); got != "ls -l" {
				t.Errorf("the fenced block shows %q", got)
			}
			if got := eval[string](t, ctx, last+`.textContent`); !strings.HasSuffix(got, "then cd there.") {
				t.Errorf("the reply ends %q", got)
			}
			if w == 360 {
				noOverflow(t, ctx, "Chat with code")
			}
			shot(t, ctx, w, fmt.Sprintf("%d-chat-backticks", w))
		})
	}
}

// TestBrowserRepliesShowTheirMarkdown: models answer in Markdown, and the
// page showed its asterisks and hashes as typed. A reply's lists, headings,
// bold, italics and links show as such, built as nodes: markup in a reply
// stays text, a link goes only to http(s), and snake_case keeps its
// underscores. The person's own message stays as typed.
func TestBrowserRepliesShowTheirMarkdown(t *testing.T) {
	for _, w := range widths {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			p := openChat(t, w)
			ctx := p.ctx
			reply := "## Plants\nWater **the basil** and *the mint* today; read_file says `soil_dry`.\n\n" +
				"- first the kitchen\n- then the **balcony**\n  and the shed\n\n" +
				"1. fill the can\n2. pour\n\n" +
				"See [the guide](https://example.com/guide) or [this](javascript:alert(1)). <b>not bold</b>"
			p.fake.Enqueue(providertest.Reply{Content: reply})
			sendMessage(t, ctx, "what **now**?")
			waitFor(t, ctx, "the reply", `document.querySelectorAll('#log .msg.agent').length === 1`)
			if got := eval[string](t, ctx, `document.querySelector('#log .msg.user').textContent`); got != "what **now**?" {
				t.Errorf("the person's message shows %q", got)
			}
			msg := `document.querySelector('#log .msg.agent')`
			for js, want := range map[string]string{
				msg + `.querySelector('.heading strong').textContent`:                                "Plants",
				`[...` + msg + `.querySelectorAll('p strong')].map(e => e.textContent).join('|')`:    "Plants|the basil",
				`[...` + msg + `.querySelectorAll('p em')].map(e => e.textContent).join('|')`:        "the mint",
				`[...` + msg + `.querySelectorAll('ul > li')].map(e => e.textContent).join('|')`:     "first the kitchen|then the balcony\nand the shed",
				msg + `.querySelector('ul strong').textContent`:                                      "balcony",
				`[...` + msg + `.querySelectorAll('ol > li')].map(e => e.textContent).join('|')`:     "fill the can|pour",
				`[...` + msg + `.querySelectorAll('a')].map(e => e.href + ' ' + e.target).join('|')`: "https://example.com/guide _blank",
				`[...` + msg + `.querySelectorAll('p code')].map(e => e.textContent).join('|')`:      "soil_dry",
				`String(` + msg + `.querySelector('b'))`:                                             "null",
			} {
				if got := eval[string](t, ctx, js); got != want {
					t.Errorf("%s = %q, want %q", js, got, want)
				}
			}
			txt := eval[string](t, ctx, msg+`.textContent`)
			for _, want := range []string{"read_file says", "[this](javascript:alert(1))", "<b>not bold</b>"} {
				if !strings.Contains(txt, want) {
					t.Errorf("the reply lacks %q: %q", want, txt)
				}
			}
			if strings.Contains(txt, "**") || strings.Contains(txt, "## ") {
				t.Errorf("Markdown marks show: %q", txt)
			}
			if w == 360 {
				noOverflow(t, ctx, "Chat with Markdown")
			}
			shot(t, ctx, w, fmt.Sprintf("%d-chat-markdown", w))

			// Spans end at their first closing mark; a link keeps the
			// parentheses of its address; a rule is a rule.
			// Lists nest under the item above them when indented to its
			// text, as in CommonMark (they were flattened, and a numbered
			// list broke in two around its details); a stray space does
			// not nest; a blank line between items keeps the list.
			p.fake.Enqueue(providertest.Reply{Content: "**a** and **b**, *c* or *d*\n* * *\n[Go](https://en.wikipedia.org/wiki/Go_(programming_language)).\n\n" +
				"1. Install\n   - run apt\n   - reboot\n\n2. Configure\n   * edit\n     1. open\n     2. save\n      and close\n- back out\n - stray space\n\nDone."})
			sendMessage(t, ctx, "more")
			waitFor(t, ctx, "the second reply", `document.querySelectorAll('#log .msg.agent').length === 2`)
			last := `[...document.querySelectorAll('#log .msg.agent')].pop()`
			for js, want := range map[string]string{
				`[...` + last + `.querySelectorAll('strong, em')].map(e => e.tagName + ':' + e.textContent).join('|')`:           "STRONG:a|STRONG:b|EM:c|EM:d",
				`String(` + last + `.querySelectorAll('hr').length)`:                                                             "1",
				last + `.querySelector('a').href`:                                                                                "https://en.wikipedia.org/wiki/Go_(programming_language)",
				`[...` + last + `.querySelectorAll(':scope > ol > li')].map(e => e.firstChild.textContent).join('|')`:            "Install|Configure",
				`[...` + last + `.querySelectorAll(':scope > ol > li:first-child > ul > li')].map(e => e.textContent).join('|')`: "run apt|reboot",
				`[...` + last + `.querySelectorAll('ol > li > ul > li > ol > li')].map(e => e.textContent).join('|')`:            "open|save\nand close",
				`[...` + last + `.querySelectorAll(':scope > ul > li')].map(e => e.textContent).join('|')`:                       "back out|stray space",
				`String(` + last + `.querySelectorAll(':scope > ol').length)`:                                                    "1",
				last + `.lastElementChild.textContent`:                                                                           "Done.",
			} {
				if got := eval[string](t, ctx, js); got != want {
					t.Errorf("%s = %q, want %q", js, got, want)
				}
			}
			// A line of 120 KB with marks left open (a command's output)
			// shows at once: each open mark scanned to the end of the
			// line, seconds of a frozen page.
			long := strings.Repeat("**a ", 30000)
			p.fake.Enqueue(providertest.Reply{Content: long})
			asked := time.Now()
			sendMessage(t, ctx, "the log, please")
			waitFor(t, ctx, "the long reply", `document.querySelectorAll('#log .msg.agent').length === 3`)
			if took := time.Since(asked); took > 3*time.Second {
				t.Errorf("a reply with a 120 KB line took %v to show", took)
			}
		})
	}
}

// TestBrowserLongReplyReadsFromItsStart: a reply taller than the log is
// scrolled so its first line shows (it was scrolled to its end, leaving
// the reader below its start), and at a phone's width the Canvas button
// sits above the log instead of floating over the lines scrolling under
// it.
func TestBrowserLongReplyReadsFromItsStart(t *testing.T) {
	for _, w := range widths {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			p := openChat(t, w)
			ctx := p.ctx
			var b strings.Builder
			b.WriteString("The start of a long answer.\n")
			for i := 1; i <= 120; i++ {
				fmt.Fprintf(&b, "Line %d of a long answer, with enough words to wrap on a phone.\n", i)
			}
			for i := 0; i < 3; i++ {
				sendMessage(t, ctx, fmt.Sprintf("short %d", i))
				waitFor(t, ctx, "the short reply", fmt.Sprintf(`document.querySelectorAll('#log .msg.agent').length === %d`, i+1))
			}
			p.fake.Enqueue(providertest.Reply{Content: b.String()})
			sendMessage(t, ctx, "tell me everything")
			waitFor(t, ctx, "the long reply", `document.querySelectorAll('#log .msg.agent').length === 4`)
			top := eval[float64](t, ctx, `(() => { const l = document.getElementById('log').getBoundingClientRect(), m = [...document.querySelectorAll('#log .msg.agent')].pop().getBoundingClientRect(); return m.top - l.top })()`)
			// Less than a pixel above is the browser rounding the scroll
			// position to whole pixels.
			if top <= -1 || top > 100 {
				t.Errorf("the long reply's start is %.0f px from the log's top; want it in view at the top", top)
			}
			if w == 360 {
				// The button is above the log, not over its lines.
				over := eval[float64](t, ctx, `document.getElementById('show-canvas').getBoundingClientRect().bottom - document.getElementById('log').getBoundingClientRect().top`)
				if over > 0 {
					t.Errorf("the Canvas button covers the log's top %.0f px", over)
				}
				noOverflow(t, ctx, "Chat with a long reply")
			}
			shot(t, ctx, w, fmt.Sprintf("%d-chat-long-reply", w))
			if w == 360 {
				step(t, ctx, "open the canvas", chromedp.Click(chromedp.ID("show-canvas")), chromedp.WaitVisible(chromedp.ID("hide-canvas")))
				if h := eval[float64](t, ctx, `document.getElementById('canvas').getBoundingClientRect().height`); h < 300 {
					t.Errorf("the canvas is %.0f px tall on the phone", h)
				}
				shot(t, ctx, w, "360-canvas-open")
				step(t, ctx, "back to the chat", chromedp.Click(chromedp.ID("hide-canvas")), chromedp.WaitVisible(chromedp.ID("show-canvas")))
			}
		})
	}
}

// TestBrowserUnreadWithAPhoneClockAhead: a reminder that fires while the
// page is closed is new when the page opens again, though the phone's
// clock is an hour ahead of the board's. The read mark took the phone's
// time of the last reply and was compared with the board's time of the
// reminder, which then looked read.
func TestBrowserUnreadWithAPhoneClockAhead(t *testing.T) {
	for _, w := range widths {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			p := openChat(t, w, `{ const now = Date.now; Date.now = () => now() + 3600e3; }`)
			ctx := p.ctx
			p.fake.Enqueue(
				providertest.Reply{ToolCalls: []providertest.ToolCall{{Name: "cron", Args: `{"action":"add","message":"Close the greenhouse window","at_seconds":3}`}}},
				providertest.Reply{Content: "Noted, in 3 seconds."},
			)
			sendMessage(t, ctx, "Remind me to close the window in 3 seconds")
			waitFor(t, ctx, "the reply", `[...document.querySelectorAll('#log .msg.agent')].some(m => m.textContent.includes('Noted, in 3 seconds'))`)
			step(t, ctx, "leave the page", chromedp.Navigate("about:blank"))
			left := time.Now()
			if ran := waitRun(t, &board{g: p.g}, "Close the greenhouse window"); ran.Before(left) {
				t.Fatalf("the reminder fired at %s, before the page was left at %s; the machine is too slow for this test's 3 s", ran, left)
			}
			step(t, ctx, "come back", chromedp.Navigate(p.g.URL+"/"))
			waitFor(t, ctx, "the chat loaded", `[...document.querySelectorAll('#log .msg')].some(m => m.textContent.includes('Close the greenhouse window'))`)
			if !eval[bool](t, ctx, `[...document.querySelectorAll('#log .msg.unread')].some(m => m.textContent.includes('Close the greenhouse window'))`) {
				t.Error("the reminder that came while the page was closed is not shown as new")
			}
			if eval[int](t, ctx, `document.querySelectorAll('#log .divider').length`) != 1 {
				t.Error("no 'new since you last looked' divider")
			}
			shot(t, ctx, w, fmt.Sprintf("%d-chat-unread-clock-ahead", w))
		})
	}
}

// heldProvider is the fake provider behind a door: while held, a chat
// request waits until it is let through or its caller gives up (counted).
type heldProvider struct {
	*providertest.Server
	srv     *httptest.Server
	held    chan struct{} // closed: requests pass
	arrived chan struct{} // one value per request that waits
	gaveUp  chan struct{} // one value per waiting request cancelled by its caller
}

func newHeldProvider(t *testing.T) *heldProvider {
	t.Helper()
	h := &heldProvider{Server: providertest.New(), held: make(chan struct{}), arrived: make(chan struct{}, 16), gaveUp: make(chan struct{}, 16)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chat/completions" {
			// Read to the end: only then does the server notice a caller
			// that goes away.
			raw, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(raw))
			select {
			case <-h.held:
			default:
				h.arrived <- struct{}{}
				select {
				case <-h.held:
				case <-r.Context().Done():
					h.gaveUp <- struct{}{}
					return
				}
			}
		}
		h.Server.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		h.release()
		h.srv.Close()
		h.Server.Close()
	})
	return h
}

func (h *heldProvider) release() {
	select {
	case <-h.held:
	default:
		close(h.held)
	}
}

// waitArrived waits until a request is held at the door.
func (h *heldProvider) waitArrived(t *testing.T) {
	t.Helper()
	select {
	case <-h.arrived:
	case <-time.After(15 * time.Second):
		t.Fatal("no request reached the provider")
	}
}

// TestBrowserReplyStaysInItsChat: a person who switches to another chat
// while Perch answers gets the answer, its canvas change and its unread
// mark in the chat it was asked in, and a notice with "Show it" where they
// are. The answer was appended to whichever chat was shown when it came.
func TestBrowserReplyStaysInItsChat(t *testing.T) {
	for _, w := range widths {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			h := newHeldProvider(t)
			p := openChatOn(t, w, h.Server, h.srv.URL)
			ctx := p.ctx
			h.Enqueue(
				providertest.Reply{ToolCalls: []providertest.ToolCall{{Name: "canvas", Args: `{"action":"create_node","type":"text","title":"Forecast","content":"Sunny, 21 °C"}`}}},
				providertest.Reply{Content: "Sunny all day."},
			)
			sendMessage(t, ctx, "What is the weather?")
			h.waitArrived(t)
			tab(t, ctx, "system")
			step(t, ctx, "switch to another chat",
				chromedp.SetValue(chromedp.ID("session"), "kitchen"),
				chromedp.Evaluate[chromedp.Void](`document.getElementById('session-form').requestSubmit()`))
			waitFor(t, ctx, "the other chat", `localStorage.getItem('perch.chat') === 'kitchen' && document.getElementById('log').textContent.includes('Chat kitchen.')`)
			if eval[bool](t, ctx, `document.getElementById('log').textContent.includes('thinking')`) {
				t.Error("the other chat says Perch is thinking about a message it was not sent")
			}
			h.release()
			waitFor(t, ctx, "the notice", `!document.getElementById('notice').hidden && document.getElementById('notice-text').textContent.includes('Perch answered in your chat “home”') && !document.getElementById('notice-switch').hidden`)
			if got := eval[string](t, ctx, `document.getElementById('log').textContent`); strings.Contains(got, "Sunny") {
				t.Errorf("the answer landed in the other chat: %q", got)
			}
			if n := eval[int](t, ctx, `document.querySelectorAll('#canvas article.node').length`); n != 0 {
				t.Errorf("the other chat's canvas has %d nodes", n)
			}
			if w == 360 {
				noOverflow(t, ctx, "Chat with the notice")
			}
			shot(t, ctx, w, fmt.Sprintf("%d-chat-answered-elsewhere", w))

			step(t, ctx, "show it", chromedp.Click(chromedp.ID("notice-switch")))
			waitFor(t, ctx, "the answer in its chat", `localStorage.getItem('perch.chat') === 'home' && [...document.querySelectorAll('#log .msg.agent')].some(m => m.textContent === 'Sunny all day.')`)
			if !eval[bool](t, ctx, `[...document.querySelectorAll('#log .msg.unread')].some(m => m.textContent === 'Sunny all day.')`) {
				t.Error("the answer read elsewhere is not shown as new in its chat")
			}
			waitFor(t, ctx, "the canvas node in its chat", `document.querySelector('#canvas article.node h3') !== null && document.querySelector('#canvas article.node h3').textContent === 'Forecast'`)
			if eval[bool](t, ctx, `document.getElementById('send').disabled`) {
				t.Error("Send stays disabled")
			}
		})
	}
}

// TestBrowserSlowAnswerCanBeCancelled: when the provider does not answer,
// the "thinking" line shows how long it has been after 15 s and offers
// Cancel, which gives Send back at once and says what became of the
// message: the gateway ends the turn (the provider's request is dropped),
// the question stays in the chat, no answer follows. There were five
// minutes of "thinking" with Send disabled.
func TestBrowserSlowAnswerCanBeCancelled(t *testing.T) {
	for _, w := range widths {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			h := newHeldProvider(t)
			p := openChatOn(t, w, h.Server, h.srv.URL)
			ctx := p.ctx
			sendMessage(t, ctx, "Are you there?")
			h.waitArrived(t)
			if eval[bool](t, ctx, `document.querySelector('#log .msg.pending button') !== null`) {
				t.Error("Cancel is offered before the wait is long")
			}
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if _, err := chromedp.Run(sctx, chromedp.Poll[chromedp.Void](`(() => { const p = document.querySelector('#log .msg.pending'); return p && /thinking… \(1[5-9] seconds so far\)/.test(p.textContent) && p.querySelector('button') !== null })()`)); err != nil {
				t.Fatalf("waiting for the time waited and Cancel: %v", err)
			}
			if !eval[bool](t, ctx, `document.getElementById('send').disabled`) {
				t.Error("Send is enabled while Perch answers")
			}
			if w == 360 {
				noOverflow(t, ctx, "Chat, a slow answer")
			}
			shot(t, ctx, w, fmt.Sprintf("%d-chat-slow-answer", w))

			step(t, ctx, "cancel", chromedp.Click(`#log .msg.pending button`))
			waitFor(t, ctx, "Send given back", `!document.getElementById('send').disabled && document.querySelector('#log .msg.pending') === null`)
			note := eval[string](t, ctx, `[...document.querySelectorAll('#log .msg.note')].pop().textContent`)
			if !strings.Contains(note, "no answer will come") || !strings.Contains(note, "stays in the chat") {
				t.Errorf("after Cancel the page says %q", note)
			}
			// What the note says is what the gateway does: the turn ends
			// and its call to the provider is dropped; the question is kept.
			select {
			case <-h.gaveUp:
			case <-time.After(10 * time.Second):
				t.Fatal("the gateway kept waiting for the provider after the page stopped waiting")
			}
			hist, err := p.g.Sys.Store.History("web:home")
			if err != nil || len(hist) != 1 || hist[0].Role != "user" || hist[0].Content != "Are you there?" {
				t.Errorf("the chat's history after Cancel: %+v, %v", hist, err)
			}
			if w == 360 {
				noOverflow(t, ctx, "Chat, cancelled")
			}
			shot(t, ctx, w, fmt.Sprintf("%d-chat-cancelled", w))

			h.release()
			sendMessage(t, ctx, "Now?")
			waitFor(t, ctx, "the next answer", `[...document.querySelectorAll('#log .msg.agent')].some(m => m.textContent === 'echo: Now?')`)
		})
	}
}

// TestBrowserSetupLaterStartsThePage: the owner puts the first-run form
// off and cancels the token prompt, then connects a provider from the
// notice bar: the setup's answer brings the token, and the chat, the
// schedules, the System panel and the live stream start with it. They
// stayed at "no token given", without a stream, until a reload.
func TestBrowserSetupLaterStartsThePage(t *testing.T) {
	for _, w := range widths {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			fake := providertest.New()
			t.Cleanup(fake.Close)
			g := appliancetest.Start(t, gatewayConfig(""), nil)
			ctx := browser(t)
			step(t, ctx, "load the page; put the setup off; cancel the token prompt",
				viewport(w), chromedp.Navigate(g.URL+"/"),
				chromedp.WaitVisible(chromedp.ID("setup-code")), chromedp.Click(chromedp.ID("setup-cancel")),
				chromedp.WaitVisible(chromedp.ID("token")), chromedp.Click(chromedp.ID("token-cancel")))
			waitFor(t, ctx, "the chat without the token", `document.getElementById('log').textContent.includes('no token given')`)
			// Clicked in the page rather than at the button's place on the
			// screen: a dialog still closing over it took the click once
			// (a CI run), and the form never opened.
			step(t, ctx, "open the setup from the notice bar", chromedp.WaitVisible(chromedp.ID("notice-setup")),
				chromedp.Evaluate[chromedp.Void](`document.getElementById('notice-setup').click()`),
				chromedp.WaitVisible(chromedp.ID("setup-code")))
			step(t, ctx, "fill in and save the setup",
				chromedp.SendKeys(chromedp.ID("setup-code"), g.SetupCode(t)),
				chromedp.SendKeys(chromedp.ID("setup-model"), "openai/gpt-4o-mini"),
				chromedp.SendKeys(chromedp.ID("setup-key"), "sk-later"),
				chromedp.SendKeys(chromedp.ID("setup-base"), fake.Base()),
				chromedp.Click(chromedp.ID("setup-save")),
				chromedp.WaitNotVisible(chromedp.ID("setup-dialog")))
			waitFor(t, ctx, "the chat loaded with the token", `document.getElementById('log').textContent.includes('Chat home. Say hello.') && !document.getElementById('log').textContent.includes('no token')`)
			waitFor(t, ctx, "the live stream", `document.getElementById('state').textContent.startsWith('ready · openai/gpt-4o-mini') && document.getElementById('channel-list').textContent.includes('1 page open')`)
			if w == 360 {
				noOverflow(t, ctx, "Chat after the setup")
			}
			shot(t, ctx, w, fmt.Sprintf("%d-setup-later-chat", w))
			tab(t, ctx, "jobs")
			waitFor(t, ctx, "the schedules", `document.querySelector('#job-list .error') === null && !document.getElementById('job-list').textContent.includes('token')`)
			tab(t, ctx, "system")
			waitFor(t, ctx, "the figures", `document.getElementById('figures').textContent.includes('openrouter, openai/gpt-4o-mini')`)
			shot(t, ctx, w, fmt.Sprintf("%d-setup-later-system", w))
			if open := eval[bool](t, ctx, `document.getElementById('token-dialog').open`); open {
				t.Error("the page asked for the token the setup handed over")
			}
			tab(t, ctx, "chat")
			sendMessage(t, ctx, "hello")
			waitFor(t, ctx, "the reply", `[...document.querySelectorAll('#log .msg.agent')].some(m => m.textContent === 'echo: hello')`)
		})
	}
}

// tooMany tolerates the 429s of a device locked out for wrong tokens.
func tooMany(e *log.Entry) bool {
	return e.Source == log.EntrySourceNetwork && strings.Contains(e.Text, "status of 429")
}

// TestBrowserStaleTokenAndATypo: a browser that kept an old token, whose
// owner then mistypes the new one, gets in with the right one: each token
// is tried with one request, so the two wrong ones are two strikes of the
// ten allowed, and the panels load. A wrong token cost a strike per panel
// (about seven), all released at once, so the old token and one typo
// locked the browser out, and chat and Schedules showed "too many wrong
// API tokens" after the right one until a reload.
func TestBrowserStaleTokenAndATypo(t *testing.T) {
	for _, w := range widths {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			fake := providertest.New()
			t.Cleanup(fake.Close)
			g := appliancetest.Start(t, gatewayConfig(fake.Base()), nil)
			ctx := browser(t) // a 429 is a console error: the test fails on one
			step(t, ctx, "open the page once and leave an old token in it", viewport(w), chromedp.Navigate(g.URL+"/"),
				chromedp.WaitVisible(chromedp.ID("token")),
				chromedp.Evaluate[chromedp.Void](`localStorage.setItem('perch.token', 'tok-OLD-4711')`),
				chromedp.Navigate(g.URL+"/"))
			waitFor(t, ctx, "the prompt for the refused token", `document.getElementById('token-dialog').open && document.getElementById('token-why').textContent.includes('saved token was refused')`)
			step(t, ctx, "mistype the token", chromedp.SendKeys(chromedp.ID("token"), browserToken[:len(browserToken)-1]), chromedp.Click(chromedp.ID("token-save")))
			waitFor(t, ctx, "the typo refused", `document.getElementById('token-why').textContent.includes('That token was refused')`)
			if !eval[bool](t, ctx, `document.getElementById('token-dialog').open`) {
				t.Fatal("the dialog closed on a wrong token")
			}
			if w == 360 {
				noOverflow(t, ctx, "the token refused")
			}
			shot(t, ctx, w, fmt.Sprintf("%d-token-typo", w))
			step(t, ctx, "enter the right token",
				chromedp.Evaluate[chromedp.Void](`document.getElementById('token').value = ''`),
				chromedp.SendKeys(chromedp.ID("token"), browserToken), chromedp.Click(chromedp.ID("token-save")),
				chromedp.WaitNotVisible(chromedp.ID("token-dialog")))
			waitFor(t, ctx, "the chat loaded", `document.getElementById('log').textContent.includes('Chat home. Say hello.')`)
			waitFor(t, ctx, "the live stream", `document.getElementById('state').textContent.startsWith('ready · openai/gpt-4o-mini') && document.getElementById('channel-list').textContent.includes('1 page open')`)
			if txt := eval[string](t, ctx, `document.getElementById('log').textContent`); strings.Contains(txt, "could not be loaded") {
				t.Errorf("the chat says %q", txt)
			}
			tab(t, ctx, "jobs")
			waitFor(t, ctx, "the schedules", `document.querySelector('#job-list .error') === null`)
			tab(t, ctx, "chat")
			shot(t, ctx, w, fmt.Sprintf("%d-token-right", w))
		})
	}
}

// TestBrowserLockedOutPageRecovers: a device that sent too many wrong
// tokens (here from another tab) opens the page with the right one: the
// panels wait the time the gateway names (Retry-After) and load, instead
// of showing "too many wrong API tokens… wait 2 seconds" until a reload.
func TestBrowserLockedOutPageRecovers(t *testing.T) {
	for _, w := range widths {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			fake := providertest.New()
			t.Cleanup(fake.Close)
			g := appliancetest.Start(t, gatewayConfig(fake.Base()), nil)
			ctx := browserWith(t, tooMany)
			step(t, ctx, "open the page once with the right token", viewport(w), chromedp.Navigate(g.URL+"/"),
				chromedp.WaitVisible(chromedp.ID("token")),
				chromedp.Evaluate[chromedp.Void](`localStorage.setItem('perch.token', '`+browserToken+`')`))
			n := evalAsync[int](t, ctx, `(async () => { let n = 0; for (let i = 0; i < 12; i++) { const r = await fetch('/admin/cron', { headers: { Authorization: 'Bearer wrong-`+fmt.Sprint(w)+`' } }); if (r.status === 429) n++; } return n })()`)
			if n == 0 {
				t.Fatal("twelve wrong tokens were not refused with 429")
			}
			step(t, ctx, "reload", chromedp.Navigate(g.URL+"/"))
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if _, err := chromedp.Run(sctx, chromedp.Poll[chromedp.Void](`document.getElementById('log').textContent.includes('Chat home. Say hello.') && document.getElementById('state').textContent.startsWith('ready · openai/gpt-4o-mini')`)); err != nil {
				t.Fatalf("the page after the lock-out (chat %q): %v", eval[string](t, ctx, `document.getElementById('log').textContent`), err)
			}
			tab(t, ctx, "jobs")
			waitFor(t, ctx, "the schedules", `document.querySelector('#job-list .error') === null`)
			if eval[bool](t, ctx, `document.getElementById('token-dialog').open`) {
				t.Error("the right token was asked for again")
			}
			shot(t, ctx, w, fmt.Sprintf("%d-token-after-lockout", w))
		})
	}
}

// TestBrowserTwoPagesFollowOneChat: with the chat open in two tabs (or on
// a phone and a laptop), what one asks and the answer appear in the other
// at once, and once in each; a page showed only its own exchanges until it
// was reloaded.
func TestBrowserTwoPagesFollowOneChat(t *testing.T) {
	p := openChat(t, 1280)
	// A second browser: the phone beside the laptop. (Each page is told
	// apart by an id of its own, so two tabs of one browser are two pages
	// as well; chromedp's second tab does not answer in headless mode.)
	other := browser(t)
	step(t, other, "open the page on the phone", viewport(360), chromedp.Navigate(p.g.URL+"/"))
	giveToken(t, other)
	waitFor(t, other, "the phone's live stream", `document.getElementById('state').textContent.startsWith('ready · ')`)

	count := func(ctx context.Context, role, text string) int {
		return eval[int](t, ctx, fmt.Sprintf(`[...document.querySelectorAll('#log .msg.%s')].filter(m => m.textContent === %q).length`, role, text))
	}
	p.fake.Enqueue(providertest.Reply{Content: "The door is shut."})
	sendMessage(t, p.ctx, "Is the door shut?")
	waitFor(t, other, "the laptop's exchange on the phone", `[...document.querySelectorAll('#log .msg.agent')].some(m => m.textContent === 'The door is shut.')`)
	waitFor(t, p.ctx, "the answer on the laptop, which asked", `[...document.querySelectorAll('#log .msg.agent')].some(m => m.textContent === 'The door is shut.')`)

	p.fake.Enqueue(providertest.Reply{Content: "Lights off."})
	sendMessage(t, other, "Turn the lights off")
	waitFor(t, p.ctx, "the phone's exchange on the laptop", `[...document.querySelectorAll('#log .msg.agent')].some(m => m.textContent === 'Lights off.')`)
	waitFor(t, other, "the answer on the phone", `[...document.querySelectorAll('#log .msg.agent')].some(m => m.textContent === 'Lights off.')`)

	// The terminal on the same chat: `perch agent -s web:home` through the
	// gateway's API, with no page id.
	p.fake.Enqueue(providertest.Reply{Content: "Heating at 19 °C."})
	req, _ := http.NewRequest(http.MethodPost, p.g.URL+"/chat", strings.NewReader(`{"message":"Heating?","session_key":"web:home","channel":"cli"}`))
	req.Header.Set("Authorization", "Bearer "+browserToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("POST /chat from the terminal: %s", res.Status)
	}
	for _, ctx := range []context.Context{p.ctx, other} {
		waitFor(t, ctx, "the terminal's exchange", `[...document.querySelectorAll('#log .msg.agent')].some(m => m.textContent === 'Heating at 19 °C.')`)
	}

	for name, ctx := range map[string]context.Context{"laptop": p.ctx, "phone": other} {
		for _, m := range []struct{ role, text string }{
			{"user", "Is the door shut?"}, {"agent", "The door is shut."},
			{"user", "Turn the lights off"}, {"agent", "Lights off."},
			{"user", "Heating?"}, {"agent", "Heating at 19 °C."},
		} {
			if n := count(ctx, m.role, m.text); n != 1 {
				t.Errorf("the %s shows %q %d times, want once", name, m.text, n)
			}
		}
		// The empty chat's greeting went with the first message.
		order := eval[string](t, ctx, `[...document.querySelectorAll('#log > li')].map(m => m.textContent).join(' | ')`)
		if want := "Is the door shut? | The door is shut. | Turn the lights off | Lights off. | Heating? | Heating at 19 °C."; order != want {
			t.Errorf("the %s reads %q, want %q", name, order, want)
		}
	}
	shot(t, other, 360, "360-chat-from-the-laptop")
}
