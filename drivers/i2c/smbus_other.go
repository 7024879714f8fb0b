//go:build !linux

package i2c

import "errors"

func openSMBus(path string) (prober, error) {
	return nil, errors.New("probing " + path + " needs Linux's i2c-dev")
}
