package provider

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Application default credentials for the cloud-model provider, in the two
// forms a board has: a service-account key file (GOOGLE_APPLICATION_CREDENTIALS)
// and gcloud's authorized-user file (`gcloud auth application-default login`).
// golang.org/x/oauth2/google does this and much more (workload identity,
// impersonation, the metadata server) for 400 KB of binary — and on a board
// the binary is resident memory — so the two flows a board uses live here.

const (
	cloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"
	defaultTokenURI    = "https://oauth2.googleapis.com/token"
)

// tokenSource yields bearer tokens.
type tokenSource interface {
	Token(ctx context.Context) (string, error)
}

type adcFile struct {
	Type         string `json:"type"`
	ClientEmail  string `json:"client_email"`
	PrivateKey   string `json:"private_key"`
	PrivateKeyID string `json:"private_key_id"`
	TokenURI     string `json:"token_uri"`
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	RefreshToken string `json:"refresh_token"`
}

// adcPath finds the credentials file: GOOGLE_APPLICATION_CREDENTIALS, else
// gcloud's well-known file.
func adcPath() (string, error) {
	if p := os.Getenv("GOOGLE_APPLICATION_CREDENTIALS"); p != "" {
		return p, nil
	}
	dir := os.Getenv("CLOUDSDK_CONFIG")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, ".config", "gcloud")
	}
	return filepath.Join(dir, "application_default_credentials.json"), nil
}

// adcTokenSource reads the credentials and returns a source that refreshes
// access tokens itself, with the cloud-platform scope.
func adcTokenSource(hc *http.Client) (tokenSource, error) {
	const fix = "run 'gcloud auth application-default login' or point GOOGLE_APPLICATION_CREDENTIALS at a service-account key file"
	path, err := adcPath()
	if err != nil {
		return nil, fmt.Errorf("cannot find application default credentials: %v; %s", err, fix)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read application default credentials %s: %v; %s", path, err, fix)
	}
	var f adcFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("application default credentials %s are not JSON: %v; %s", path, err, fix)
	}
	src := &cachedToken{hc: hc}
	switch f.Type {
	case "service_account":
		key, err := parseRSAKey(f.PrivateKey)
		if err != nil || f.ClientEmail == "" {
			return nil, fmt.Errorf("service-account key %s is unusable (%v); download a new JSON key for the service account", path, err)
		}
		src.fetch = func(ctx context.Context) (*tokenReply, error) { return serviceAccountToken(ctx, hc, f, key) }
	case "authorized_user":
		if f.RefreshToken == "" || f.ClientID == "" {
			return nil, fmt.Errorf("authorized-user credentials %s lack refresh_token or client_id; %s", path, fix)
		}
		src.fetch = func(ctx context.Context) (*tokenReply, error) { return refreshToken(ctx, hc, f) }
	default:
		return nil, fmt.Errorf("credentials %s are of type %q, which perch does not support; use a service-account key or %s", path, f.Type, "'gcloud auth application-default login'")
	}
	return src, nil
}

func parseRSAKey(p string) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(p))
	if block == nil {
		return nil, errors.New("private_key is not PEM")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if rk, ok := k.(*rsa.PrivateKey); ok {
			return rk, nil
		}
		return nil, errors.New("private_key is not an RSA key")
	}
	return x509.ParsePKCS1PrivateKey(block.Bytes)
}

type tokenReply struct {
	AccessToken string `json:"access_token"`
	ExpiresIn   int64  `json:"expires_in"`
	Error       string `json:"error"`
	Description string `json:"error_description"`
}

// serviceAccountToken exchanges a signed JWT for an access token (RFC 7523).
func serviceAccountToken(ctx context.Context, hc *http.Client, f adcFile, key *rsa.PrivateKey) (*tokenReply, error) {
	uri := f.TokenURI
	if uri == "" {
		uri = defaultTokenURI
	}
	now := time.Now()
	hdr, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": f.PrivateKeyID})
	claims, _ := json.Marshal(map[string]any{
		"iss": f.ClientEmail, "scope": cloudPlatformScope, "aud": uri,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	})
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString(hdr) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return nil, fmt.Errorf("signing the token request: %w", err)
	}
	return postToken(ctx, hc, uri, url.Values{
		"grant_type": {"urn:ietf:params:oauth:grant-type:jwt-bearer"},
		"assertion":  {signing + "." + enc.EncodeToString(sig)},
	})
}

// refreshToken trades gcloud's refresh token for an access token.
func refreshToken(ctx context.Context, hc *http.Client, f adcFile) (*tokenReply, error) {
	uri := f.TokenURI
	if uri == "" {
		uri = defaultTokenURI
	}
	return postToken(ctx, hc, uri, url.Values{
		"grant_type": {"refresh_token"}, "refresh_token": {f.RefreshToken},
		"client_id": {f.ClientID}, "client_secret": {f.ClientSecret},
	})
}

func postToken(ctx context.Context, hc *http.Client, uri string, form url.Values) (*tokenReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, uri, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("token endpoint %s: %w", uri, err)
	}
	defer resp.Body.Close()
	var tr tokenReply
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	json.Unmarshal(body, &tr)
	if resp.StatusCode != http.StatusOK || tr.AccessToken == "" {
		msg := tr.Error
		if tr.Description != "" {
			msg += ": " + tr.Description
		}
		if msg == "" {
			msg = resp.Status
		}
		return nil, fmt.Errorf("token endpoint refused the credentials (%s); renew them with 'gcloud auth application-default login' or a new key file", msg)
	}
	return &tr, nil
}

// cachedToken reuses a token until a minute before it expires.
type cachedToken struct {
	hc    *http.Client
	fetch func(ctx context.Context) (*tokenReply, error)

	mu      sync.Mutex
	token   string
	expires time.Time
}

func (c *cachedToken) Token(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != "" && time.Until(c.expires) > time.Minute {
		return c.token, nil
	}
	tr, err := c.fetch(ctx)
	if err != nil {
		return "", err
	}
	life := time.Duration(tr.ExpiresIn) * time.Second
	if life <= 0 {
		life = time.Hour
	}
	c.token, c.expires = tr.AccessToken, time.Now().Add(life)
	return c.token, nil
}
