package config

import (
	"errors"
	"net/url"
	"strings"
)

// ShowURL is s as an error message or the page may show it: a password in
// its user part (http://user:pass@proxy:3128, a common way to give a proxy
// its credentials) is replaced by "xxxxx", as url.URL.Redacted does, even
// when s does not parse, since the messages that quote s are mostly about
// values that do not.
func ShowURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	rest, scheme := s, ""
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, rest = s[:i+3], s[i+3:]
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return s
	}
	user := authority[:at]
	if i := strings.Index(user, ":"); i >= 0 {
		user = user[:i+1] + "xxxxx"
	}
	return scheme + user + rest[at:]
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

// parseProblem is why url.Parse refused s, without s itself: url.Error
// repeats the whole input, password included.
func parseProblem(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
