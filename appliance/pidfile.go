package appliance

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/perchhq/perch/appliance/config"
)

// PIDInfo is the content of {config_dir}/perch.pid.
type PIDInfo struct {
	PID  int    `json:"pid"`
	Addr string `json:"addr"`
}

func writePID(path, addr string) error {
	data, _ := json.Marshal(PIDInfo{PID: os.Getpid(), Addr: addr})
	return config.WriteFileAtomic(path, append(data, '\n'), 0o644)
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
