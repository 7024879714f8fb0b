package config

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// ShowURL is s as an error message or the page may show it: a password in
// its user part (http://user:pass@proxy:3128, a common way to give a proxy
// its credentials) is replaced by "xxxxx", as url.URL.Redacted does, and
// so is a user part without one (https://token@host: a key given as the
// user name). Also when s does not parse, when it has no scheme
// (user:pass@proxy:3128 parses as the scheme "user" with the rest opaque),
// and when a / ? # in the password made the parser take the rest for the
// host, path or fragment: the messages that quote s are mostly about
// values that are wrong.
func ShowURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Opaque == "" && (u.User != nil || !strings.Contains(s, "@")) {
		if u.User != nil {
			if _, ok := u.User.Password(); !ok {
				u.User = url.User("xxxxx")
			}
		}
		return u.Redacted()
	}
	// A password may hold / ? # (unencoded), so the user part runs to the
	// last @: an @ further on, in a query, hides more than it must, in a
	// message about a broken URL.
	user := userPart(s)
	if user == "" {
		return s
	}
	masked := "xxxxx"
	if i := strings.Index(user, ":"); i >= 0 {
		masked = user[:i+1] + "xxxxx"
	}
	at := strings.LastIndex(s, "@")
	return s[:at-len(user)] + masked + s[at:]
}

// URLSecret is the credential in s's user part: its password, or the user
// name when there is no password; "" when there is neither. It is a secret
// like any other, to be scrubbed from text that comes back from outside.
func URLSecret(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return ""
	}
	if p, ok := u.User.Password(); ok {
		return p
	}
	return u.User.Username()
}

// StrayAt is the error for a URL that parsed with an @ outside its user
// part: a password holding / ? or # made the parser read the rest as the
// host (a port of letters), the path or the fragment, and the URL would
// go to the wrong place with no credentials.
func StrayAt(s string, u *url.URL) error {
	if u.User == nil && strings.Contains(s, "@") {
		return fmt.Errorf("%q has an @ outside its user part; write it as scheme://user:password@host, with any / ? # @ %% in the password written %%2F %%3F %%23 %%40 %%25", ShowURL(s))
	}
	return nil
}

// ParseProblem is why url.Parse refused s, in words that do not repeat s:
// url.Error quotes the whole input, and its inner error a piece of it
// ("invalid port \":pa\" after host" for a password holding a slash).
func ParseProblem(s string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if user := userPart(s); user != "" {
		// The parser quotes what it stopped at; when that lies in the
		// user part, it is a piece of the password.
		msg, quoted := err.Error(), ""
		if i := strings.IndexByte(msg, '"'); i >= 0 {
			if q, qerr := strconv.QuotedPrefix(msg[i:]); qerr == nil {
				quoted, _ = strconv.Unquote(q)
			}
		}
		if quoted == "" || strings.Contains(user, quoted) {
			return errors.New("it does not parse as a URL; a password in it must have its / ? # @ % written as %2F %3F %23 %40 %25")
		}
	}
	return err
}

// userPart is what may be the user part of s, a URL that did not parse:
// from the scheme's "://" (or the start) to the last "@", or "".
func userPart(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return ""
	}
	return s[:at]
}
