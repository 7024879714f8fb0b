package line

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/channel"
)

// apiError is a Messaging API error answer.
type apiError struct {
	Status  int
	Message string
	Details []struct {
		Message  string `json:"message"`
		Property string `json:"property"`
	}
	RetryAfter time.Duration
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("line: HTTP %d: %s", e.Status, e.Message)
	for _, d := range e.Details {
		s += fmt.Sprintf("; %s: %s", d.Property, d.Message)
	}
	return s
}

// maxAnswer caps an API answer read into memory.
const maxAnswer = 1 << 20

// botInfo checks the access token and learns the bot's user id and name.
func (c *Channel) botInfo(ctx context.Context) error {
	var info struct {
		UserID      string `json:"userId"`
		DisplayName string `json:"displayName"`
	}
	if err := c.do(ctx, http.MethodGet, c.apiBase+"/v2/bot/info", "", nil, &info); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			return ErrTokenRejected
		}
		return err
	}
	c.mu.Lock()
	c.botID, c.botName = info.UserID, info.DisplayName
	c.mu.Unlock()
	c.log.Info("LINE bot ready", "bot", info.DisplayName)
	return nil
}

func (c *Channel) identity() (id, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.botID, c.botName
}

// post sends body as JSON and decodes the answer into out (nil: ignored).
func (c *Channel) post(ctx context.Context, url, retryKey string, body, out any) error {
	return c.do(ctx, http.MethodPost, url, retryKey, body, out)
}

func (c *Channel) do(ctx context.Context, method, url, retryKey string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token.Value())
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if retryKey != "" {
		req.Header.Set("X-Line-Retry-Key", retryKey)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("line: %s %s: %w", method, pathOf(url), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("line: %s %s: reading the answer: %w", method, pathOf(url), err)
	}
	if resp.StatusCode/100 != 2 {
		data = channel.Scrub(data, c.token)
		ae := &apiError{Status: resp.StatusCode}
		var eb struct {
			Message string `json:"message"`
			Details []struct {
				Message  string `json:"message"`
				Property string `json:"property"`
			} `json:"details"`
		}
		if json.Unmarshal(data, &eb) == nil && eb.Message != "" {
			ae.Message, ae.Details = eb.Message, eb.Details
		} else {
			ae.Message = strings.TrimSpace(string(data[:min(len(data), 200)]))
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			ae.RetryAfter = time.Duration(s) * time.Second
		}
		return ae
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("line: %s %s: the answer is not JSON: %w", method, pathOf(url), err)
		}
	}
	return nil
}

// pathOf drops the scheme and host from url for messages.
func pathOf(url string) string {
	if i := strings.Index(url, "/v2/"); i >= 0 {
		return url[i:]
	}
	return url
}

// classify turns a send's error into what channel.Sender should do.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		return err // network: transient
	}
	switch {
	case ae.Status == http.StatusTooManyRequests && strings.Contains(strings.ToLower(ae.Message), "monthly limit"):
		return channel.Fail(channel.Permanent, fmt.Errorf("%w (LINE's monthly message quota is used up: replies through the free reply token still work; pushes resume next month or with a larger plan)", err))
	case ae.Status == http.StatusTooManyRequests:
		return channel.RetryAfter(ae.RetryAfter, err)
	case ae.Status >= 500:
		return err
	case ae.Status == http.StatusBadRequest:
		for _, d := range ae.Details {
			if strings.Contains(d.Property, "text") && strings.Contains(strings.ToLower(d.Message), "length") {
				return channel.Fail(channel.TooLong, err)
			}
		}
	}
	return channel.Fail(channel.Permanent, err)
}
