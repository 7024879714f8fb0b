package web_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/perchhq/perch/appliance/appliancetest"
	"github.com/perchhq/perch/appliance/channel/telegram/telegramtest"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// TestBrowserPairing: a stranger writes to a Telegram bot whose allow_from
// does not list them and gets a pairing code; the owner sees them on the
// System panel, lets them in with one click, and the config lists them,
// the running channel admits them and they are told so.
func TestBrowserPairing(t *testing.T) {
	for _, w := range widths {
		t.Run(strconv.Itoa(w), func(t *testing.T) {
			fake := providertest.New()
			t.Cleanup(fake.Close)
			tg := telegramtest.New("123456:pairing-browser-token")
			t.Cleanup(tg.Close)
			cfg := gatewayConfig(fake.Base())
			cfg["channels"] = map[string]any{"telegram": map[string]any{
				"enabled": true, "token": tg.Token, "api_base": tg.Base(), "allow_from": []any{"42"},
			}}
			g := appliancetest.StartWith(t, cfg, appliancetest.Options{})
			stranger := telegramtest.User{ID: 777, FirstName: "Bob", Username: "bobby"}
			tg.Add(telegramtest.Message{From: stranger, Text: "hello?"})
			sent := tg.WaitSent(1, 20*time.Second)
			if len(sent) != 1 || !strings.Contains(sent[0].Text, "code") {
				t.Fatalf("the stranger's answer: %+v", sent)
			}

			ctx := browser(t)
			step(t, ctx, "load the page", viewport(w), chromedp.Navigate(g.URL+"/"))
			giveToken(t, ctx)
			tab(t, ctx, "system")
			waitFor(t, ctx, "the stranger waiting to be let in",
				`!document.getElementById('pairing').hidden && document.getElementById('pairing-list').textContent.includes('Bob @bobby on Telegram')`)
			noOverflow(t, ctx, "the System panel with a pairing")
			shot(t, ctx, w, strconv.Itoa(w)+"-pairing")
			step(t, ctx, "let them in", chromedp.Click(`#pairing-list button`))
			waitFor(t, ctx, "the confirmation", `document.getElementById('pairing-list').textContent.includes('can talk to the bot now (added to channels.telegram.allow_from)')`)

			c, err := config.Load(config.Options{Path: g.ConfigPath, Env: func(string) (string, bool) { return "", false }})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(c.Channels.Telegram.AllowFrom, ","); got != "42,777" {
				t.Errorf("allow_from after letting them in: %s", got)
			}
			if s := tg.WaitSent(2, 20*time.Second); len(s) < 2 {
				t.Errorf("the stranger was not told they are in: %+v", s)
			}
			tg.Add(telegramtest.Message{From: stranger, Text: "now?"})
			deadline := time.Now().Add(20 * time.Second)
			for fake.Calls() == 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if fake.Calls() == 0 {
				t.Error("the admitted sender's message did not reach the model")
			}
		})
	}
}
