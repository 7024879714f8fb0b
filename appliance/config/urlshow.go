package config

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
)

// ShowURL is s as an error message or the page may show it: a password in
// its user part (http://user:pass@proxy:3128, a common way to give a proxy
// its credentials) is replaced by "xxxxx", as url.URL.Redacted does. Also
// when s does not parse, and when it has no scheme (user:pass@proxy:3128
// parses as the scheme "user" with the rest opaque): the messages that
// quote s are mostly about values that are wrong.
func ShowURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Opaque == "" {
		return u.Redacted()
	}
	// A password may hold / ? # (unencoded, which is why s did not
	// parse), so the user part runs to the last @: an @ further on, in a
	// query, hides more than it must, in a message about a broken URL.
	user := userPart(s)
	i := strings.Index(user, ":")
	if i < 0 {
		return s
	}
	at := strings.LastIndex(s, "@")
	return s[:at-len(user)] + user[:i+1] + "xxxxx" + s[at:]
}

// URLPassword is the password in s's user part, or "": it is a secret
// like any other, to be scrubbed from text that comes back from outside.
func URLPassword(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	return p
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
