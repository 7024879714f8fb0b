package systemd

import (
	"fmt"
	"strings"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Ready tells systemd that start-up is complete (READY=1): call it once the
// HTTP listener accepts connections, so `systemctl start perch` returns only
// when the gateway answers. Off systemd (NOTIFY_SOCKET unset) it does nothing
// and returns (false, nil); sent reports whether a message went out.
func Ready() (sent bool, err error) { return notify(daemon.SdNotifyReady) }

// Stopping tells systemd that shutdown has begun (STOPPING=1), so
// `systemctl status` shows "deactivating" while turns wind down. Off systemd
// it is a no-op returning (false, nil).
func Stopping() (sent bool, err error) { return notify(daemon.SdNotifyStopping) }

// Status sets the one-line status text `systemctl status` shows
// ("Status: ..."). Newlines would end the notify message early, so they are
// folded into spaces. Off systemd it is a no-op returning (false, nil).
func Status(text string) (sent bool, err error) {
	text = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(text)
	return notify("STATUS=" + text)
}

func notify(state string) (bool, error) {
	sent, err := daemon.SdNotify(false, state)
	if err != nil {
		name, _, _ := strings.Cut(state, "=")
		return false, fmt.Errorf("systemd: notify %s: %w (is NOTIFY_SOCKET a socket systemd listens on?)", name, err)
	}
	return sent, nil
}
