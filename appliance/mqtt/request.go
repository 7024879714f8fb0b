package mqtt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/eclipse/paho.golang/paho"

	"github.com/perchhq/perch/appliance/bus"
)

// Request limits.
const (
	// maxSessionKey matches /chat's bound on session keys.
	maxSessionKey = 400
	// defaultSession is the session of requests that name none.
	defaultSession = Channel + ":default"
	// doneTTL is how long an answered request is remembered, to recognise
	// the broker's redelivery of it after a reconnection.
	doneTTL = 10 * time.Minute
	// maxRemembered bounds that memory.
	maxRemembered = 256
)

// request is one agent request in progress or recently answered.
type request struct {
	key string
	// packets are the deliveries to acknowledge once answered: the first,
	// and any redelivery while it ran.
	packets []paho.PublishReceived
	done    bool
	doneAt  time.Time
}

// wireRequest is the JSON form of a request.
type wireRequest struct {
	Message    string          `json:"message"`
	SessionKey string          `json:"session_key"`
	ID         json.RawMessage `json:"id"`
}

// response is the answer's JSON: the request's id (null when it had none),
// the reply, and the error when the turn failed.
type response struct {
	ID         json.RawMessage `json:"id"`
	Response   string          `json:"response"`
	SessionKey string          `json:"session_key,omitempty"`
	Error      string          `json:"error,omitempty"`
}

// outMessage is an outbound message on <prefix>/messages.
type outMessage struct {
	ChatID string `json:"chat_id"`
	Text   string `json:"text"`
}

// onPublish receives every message from the broker, on paho's single
// delivery goroutine: it must not block, so requests run on their own.
func (l *Link) onPublish(pr paho.PublishReceived) (bool, error) {
	switch pr.Packet.Topic {
	case l.topics.request:
		if pr.Packet.Retain {
			// Brokers that ignore retain handling still mark it: a
			// retained request is an old one, answered before.
			l.log.Info("a retained MQTT agent request ignored; clear it with an empty retained message", "topic", pr.Packet.Topic)
			break
		}
		l.accept(pr)
		return true, nil
	case l.topics.haLive:
		if strings.TrimSpace(string(pr.Packet.Payload)) == payloadOnline {
			select {
			case l.birth <- struct{}{}:
			default:
			}
		}
	}
	ack(pr)
	return true, nil
}

func ack(pr paho.PublishReceived) {
	// An error means the connection that delivered it is gone: the broker
	// delivers it again on the next one.
	_ = pr.Client.Ack(pr.Packet)
}

// requestKey identifies a delivery and its redeliveries: the broker resends
// an unacknowledged message with the same packet id.
func requestKey(p *paho.Publish) string {
	h := sha256.New()
	var id [2]byte
	binary.BigEndian.PutUint16(id[:], p.PacketID)
	h.Write(id[:])
	h.Write([]byte(p.Topic))
	h.Write([]byte{0})
	if p.Properties != nil {
		h.Write([]byte(p.Properties.ResponseTopic))
		h.Write([]byte{0})
		h.Write(p.Properties.CorrelationData)
		h.Write([]byte{0})
	}
	h.Write(p.Payload)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// accept starts a request's turn, or recognises a redelivery of one
// running or answered.
func (l *Link) accept(pr paho.PublishReceived) {
	p := pr.Packet
	l.reqMu.Lock()
	if l.stopping {
		l.reqMu.Unlock()
		return // not acknowledged: delivered again after the restart
	}
	var r *request
	if p.QoS > 0 {
		key := requestKey(p)
		if old, ok := l.requests[key]; ok && p.Duplicate() {
			l.mu.Lock()
			l.st.redelivered++
			l.mu.Unlock()
			if old.done {
				l.reqMu.Unlock()
				ack(pr)
				return
			}
			old.packets = append(old.packets, pr)
			l.reqMu.Unlock()
			return
		}
		l.prune()
		r = &request{key: key, packets: []paho.PublishReceived{pr}}
		l.requests[key] = r
	} else {
		select {
		case l.qos0 <- struct{}{}:
		default:
			l.reqMu.Unlock()
			l.log.Warn("QoS 0 agent request refused: too many in progress; send requests with QoS 1 to have them wait")
			return
		}
		r = &request{packets: []paho.PublishReceived{pr}}
	}
	l.reqWG.Add(1)
	l.reqMu.Unlock()
	go l.serve(r)
}

// prune forgets answered requests past doneTTL, and the oldest beyond
// maxRemembered. Called with reqMu held.
func (l *Link) prune() {
	var oldest *request
	for k, r := range l.requests {
		if r.done && time.Since(r.doneAt) > doneTTL {
			delete(l.requests, k)
			continue
		}
		if r.done && (oldest == nil || r.doneAt.Before(oldest.doneAt)) {
			oldest = r
		}
	}
	if len(l.requests) >= maxRemembered && oldest != nil {
		delete(l.requests, oldest.key)
	}
}

// serve runs one request's turn and publishes the answer, then
// acknowledges the request. A turn cut short by the gateway stopping is
// neither answered nor acknowledged: the broker hands it over again at the
// next start.
func (l *Link) serve(r *request) {
	defer l.reqWG.Done()
	p := r.packets[0].Packet
	if p.QoS == 0 {
		defer func() { <-l.qos0 }()
	}
	ctx := l.reqCtx
	req, perr := parseRequest(p.Payload, l.opts.OtherSessions)
	resp := response{ID: req.ID, SessionKey: req.SessionKey}
	if len(resp.ID) == 0 {
		resp.ID = json.RawMessage("null")
	}
	if perr != nil {
		resp.Error = perr.Error()
		resp.Response = "Sorry, I could not read the request: " + perr.Error()
		l.log.Info("malformed MQTT agent request", "err", perr)
	} else {
		in := bus.Inbound{
			Channel: Channel, SessionKey: req.SessionKey, Text: req.Message,
			// No chat id: an automation asking over MQTT is not a person, so
			// it never becomes the "last active chat" USB notices and
			// heartbeats go to.
			RestrictTools: !l.cfg.AllowAllTools,
		}
		text, err := l.ask(ctx, in)
		switch {
		case err == nil:
			resp.Response = text
		case errors.Is(err, ErrStopped) || ctx.Err() != nil:
			return
		default:
			resp.Error = err.Error()
			resp.Response = "Sorry, I could not answer: " + err.Error()
			if in.RestrictTools {
				// Any client of the broker may ask: it learns nothing of
				// the board's setup (config keys, the provider's address
				// on the LAN); the owner reads the reason in the log.
				resp.Error = "the turn failed; the reason is in the gateway's log"
				resp.Response = "Sorry, I could not answer just now; please try again later."
			}
			l.log.Warn("MQTT agent request failed", "session", req.SessionKey, "err", err)
		}
	}
	topic, props := l.topics.response, &paho.PublishProperties{ContentType: "application/json"}
	if p.Properties != nil {
		if rt := p.Properties.ResponseTopic; rt != "" {
			if l.replyTopic(rt) {
				topic = rt
			} else {
				l.log.Info("an MQTT request's response topic is outside this board's; answered on its own", "asked", rt, "topic", topic)
			}
		}
		props.CorrelationData = p.Properties.CorrelationData
	}
	if !l.deliver(ctx, topic, mustJSON(resp), props) {
		return
	}
	l.reqMu.Lock()
	r.done, r.doneAt = true, time.Now()
	packets := r.packets
	l.reqMu.Unlock()
	for _, pr := range packets {
		ack(pr)
	}
	l.mu.Lock()
	l.st.answered++
	l.mu.Unlock()
}

// replyTopic reports whether a request's MQTT 5 response topic may carry
// its answer: the board's response topic or one below it. Anything else
// would have the board publish, under its login, where the asking client
// may not (Home Assistant's discovery topics, the board's own status), and
// a topic the broker refuses held the request, and every one after it,
// for good.
func (l *Link) replyTopic(t string) bool {
	if strings.ContainsAny(t, "+#") {
		return false
	}
	return t == l.topics.response || strings.HasPrefix(t, l.topics.response+"/")
}

// ask runs the turn, waiting while the agent is busy.
func (l *Link) ask(ctx context.Context, in bus.Inbound) (string, error) {
	if l.opts.Agent == nil {
		return "", errors.New("mqtt: this gateway has no agent")
	}
	wait := time.Second
	for {
		text, err := l.opts.Agent(ctx, in)
		if !errors.Is(err, ErrBusy) {
			return text, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ErrStopped
		case <-t.C:
		}
		wait = min(wait*2, 30*time.Second)
	}
}

// deliver publishes an answer at QoS 1, waiting out a reconnection, until
// the broker acknowledges it or the link stops. An answer the broker
// refuses (its ACL) maxRefusals times is dropped, and its request
// acknowledged: retrying it for ever held the request's slot, and the
// broker sends only so many unacknowledged requests.
func (l *Link) deliver(ctx context.Context, topic string, payload []byte, props *paho.PublishProperties) bool {
	wait := time.Second
	refusals := 0
	for {
		cm := l.conn()
		if cm == nil {
			return false
		}
		if err := cm.AwaitConnection(ctx); err != nil {
			return false
		}
		err := l.publish(ctx, topic, payload, 1, false, props)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if errors.Is(err, errRefused) {
			if refusals++; refusals >= maxRefusals {
				l.log.Warn("MQTT answer dropped: the broker refused it", "topic", topic, "tries", refusals, "err", err)
				return true
			}
		}
		l.log.Warn("MQTT answer not delivered yet; retrying", "topic", topic, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(wait*2, 30*time.Second)
	}
}

// parseRequest reads a request: JSON {message, session_key?, id?}, or any
// other text as the message itself (what Home Assistant's mqtt.publish
// sends most simply). The result carries the id and session even when the
// message is missing, so the error answer can be matched.
func parseRequest(payload []byte, others []string) (wireRequest, error) {
	var req wireRequest
	trimmed := bytes.TrimSpace(payload)
	if !utf8.Valid(trimmed) {
		return req, errors.New("mqtt: the request is not UTF-8 text")
	}
	if len(trimmed) > 0 && trimmed[0] == '{' {
		if err := json.Unmarshal(trimmed, &req); err != nil {
			var typ *json.UnmarshalTypeError
			if errors.As(err, &typ) && typ.Field != "" {
				return wireRequest{}, fmt.Errorf("mqtt: the request's %q must be a string, not a %s; send {\"message\": \"…\", \"session_key\": \"…\", \"id\": \"…\"}", typ.Field, typ.Value)
			}
			return wireRequest{}, fmt.Errorf("mqtt: the request is not valid JSON (%v); send {\"message\": \"…\", \"session_key\": \"…\", \"id\": \"…\"} or plain text", err)
		}
	} else {
		req.Message = string(trimmed)
	}
	if req.SessionKey == "" {
		req.SessionKey = defaultSession
	}
	if len(req.SessionKey) > maxSessionKey || strings.ContainsFunc(req.SessionKey, unicode.IsControl) {
		bad := req.SessionKey
		req.SessionKey = ""
		return req, fmt.Errorf("mqtt: session_key must be up to %d characters without control characters (got %d bytes)", maxSessionKey, len(bad))
	}
	// Anyone who may publish on the request topic could otherwise read a
	// chat's history through the model, or put words in it, by naming its
	// session.
	for _, p := range others {
		if strings.HasPrefix(req.SessionKey, p+":") {
			bad := req.SessionKey
			req.SessionKey = ""
			return req, fmt.Errorf("mqtt: session_key %q belongs to a conversation on %s, which MQTT requests may not join; choose a key of your own, such as \"ha:morning\"", bad, p)
		}
	}
	if strings.TrimSpace(req.Message) == "" {
		return req, errors.New("mqtt: the request has no message; send {\"message\": \"…\"} or plain text")
	}
	return req, nil
}
