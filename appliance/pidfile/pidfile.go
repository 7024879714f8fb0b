// Package pidfile announces a running gateway to the CLI on the same
// machine: {config_dir}/perch.pid holds the gateway's pid, its address and a
// key that proves a listener at that address is this gateway.
//
// # Concepts
//
// The CLI (perch cron, perch agent, perch status) talks to a running
// gateway through its API, since the gateway holds the database. It must
// not hand the API token to whatever happens to listen at the recorded
// address: after a power loss the pid and the port may belong to another
// program. So the gateway writes a random key into the pid file (0600, only
// the owner can read it) and answers a challenge sent to /health with
// Proof(key, challenge); the CLI sends the token only to a listener that
// proves it knows the key.
package pidfile

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
)

// Headers of the /health challenge.
const (
	ChallengeHeader = "X-Perch-Challenge"
	ProofHeader     = "X-Perch-Proof"
)

// Info is the content of the pid file.
type Info struct {
	PID  int    `json:"pid"`
	Addr string `json:"addr"`
	// Key is hex; it never leaves the machine.
	Key string `json:"key"`
}

// NewKey returns a fresh random key for Write.
func NewKey() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Write records this process at addr with key, atomically (temp file and
// rename) but not durably: it describes this boot's process only, and an
// fsync would cost start-up time for nothing.
func Write(path, addr, key string) error {
	data, _ := json.Marshal(Info{PID: os.Getpid(), Addr: addr, Key: key})
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Read returns the gateway path names, or an error when there is none
// (absent or damaged file, dead process).
func Read(path string) (Info, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Info{}, err
	}
	var p Info
	if err := json.Unmarshal(data, &p); err != nil || p.PID <= 0 {
		return Info{}, fmt.Errorf("pid file %s is damaged", path)
	}
	if err := syscall.Kill(p.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return Info{}, fmt.Errorf("gateway pid %d is not running", p.PID)
	}
	return p, nil
}

// Proof is what a gateway holding key answers to challenge.
func Proof(key, challenge string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(challenge))
	return hex.EncodeToString(m.Sum(nil))
}

// Valid reports whether proof answers challenge for key, in constant time.
func Valid(key, challenge, proof string) bool {
	if key == "" || challenge == "" {
		return false
	}
	return hmac.Equal([]byte(Proof(key, challenge)), []byte(proof))
}

// DialAddr turns a listen address into one a client can reach: the
// unspecified address becomes loopback.
func DialAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // a wildcard listener also answers on loopback
	}
	return net.JoinHostPort(host, port)
}
