package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/perchhq/perch/appliance/gateway/attempts"
)

// Wrong API tokens allowed per client: maxWrongTokens at once, then one per
// wrongTokenEvery (10 a minute). A random token of 24 or more characters
// is out of reach at that pace; the limit also makes a weak one costly.
const (
	maxWrongTokens  = 10
	wrongTokenEvery = 6 * time.Second
)

// tokenGuard limits and logs wrong API tokens by client.
type tokenGuard struct {
	limit   *attempts.Limiter
	wrong   *attempts.Tally // wrong tokens
	refused *attempts.Tally // requests refused while a client waits
}

func newTokenGuard(log *slog.Logger) *tokenGuard {
	return &tokenGuard{
		limit: attempts.NewLimiter(attempts.Options{Burst: maxWrongTokens, Every: wrongTokenEvery}),
		wrong: attempts.NewTally(attempts.TallyOptions{
			First: func(c attempts.Client) {
				log.Warn("gateway: wrong API token; later ones are summed up each minute", "client", c.String())
			},
			Report: func(s attempts.Summary) { log.Warn("gateway: wrong API tokens", s.LogAttrs()...) },
		}),
		refused: attempts.NewTally(attempts.TallyOptions{
			First: func(c attempts.Client) {
				log.Warn("gateway: too many wrong API tokens; refusing the client's requests for a while",
					"client", c.String(), "allowed", fmt.Sprintf("%d, then 1 per %v", maxWrongTokens, wrongTokenEvery))
			},
			Report: func(s attempts.Summary) {
				log.Warn("gateway: requests refused after too many wrong API tokens", s.LogAttrs()...)
			},
		}),
	}
}

// check answers 429 itself and returns false when r's client must wait.
func (g *tokenGuard) check(w http.ResponseWriter, r *http.Request) bool {
	if g.limit.Empty() { // no wrong token lately: the common case costs nothing
		return true
	}
	c := attempts.ClientOf(r.RemoteAddr)
	wait := g.limit.Wait(c)
	if wait == 0 {
		return true
	}
	g.refused.Add(c)
	secs := int(wait.Seconds() + 0.999)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	WriteError(w, http.StatusTooManyRequests, fmt.Sprintf("too many wrong API tokens from your address; wait %d seconds, then send the right gateway.api_token", secs))
	return false
}

// fail records a wrong token from r's client.
func (g *tokenGuard) fail(r *http.Request) {
	c := attempts.ClientOf(r.RemoteAddr)
	g.limit.Fail(c)
	g.wrong.Add(c)
}

func (g *tokenGuard) close() {
	g.wrong.Close()
	g.refused.Close()
}
