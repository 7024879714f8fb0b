package appliance

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
)

// PIDInfo is the content of {config_dir}/perch.pid.
type PIDInfo struct {
	PID  int    `json:"pid"`
	Addr string `json:"addr"`
}

// writePID writes the pid file atomically (temp file and rename) but not
// durably: it describes this boot's process only, and an fsync would cost
// start-up time for nothing.
func writePID(path, addr string) error {
	data, _ := json.Marshal(PIDInfo{PID: os.Getpid(), Addr: addr})
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readPID returns the running gateway named by path, or an error when there
// is none (absent file, dead process).
func readPID(path string) (PIDInfo, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return PIDInfo{}, err
	}
	var p PIDInfo
	if err := json.Unmarshal(data, &p); err != nil || p.PID <= 0 {
		return PIDInfo{}, fmt.Errorf("pid file %s is damaged", path)
	}
	if err := syscall.Kill(p.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return PIDInfo{}, fmt.Errorf("gateway pid %d is not running", p.PID)
	}
	return p, nil
}

// dialAddr turns a listen address into one a client can reach: the
// unspecified address becomes loopback.
func dialAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // a wildcard listener also answers on loopback
	}
	return net.JoinHostPort(host, port)
}
