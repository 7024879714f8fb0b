package devices

import "github.com/perchhq/perch/drivers/usb"

// Event is one USB device coming or going, as an observer sees it.
type Event struct {
	Connected bool
	// Offline marks a change found at start by comparing with the list
	// saved at the last stop: it happened while Perch was not running.
	Offline bool
	Device  usb.Device
}

// Observe adds fn to the observers told of every change as soon as it is
// seen, without the batching of chat notifications (the MQTT link turns
// each into a Home Assistant event). Call it before Start. fn runs on the
// service's goroutine and must not block.
func (s *Service) Observe(fn func(Event)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observers = append(s.observers, fn)
}

func (s *Service) tell(cs []change) {
	if len(cs) == 0 {
		return
	}
	s.mu.Lock()
	obs := s.observers
	s.mu.Unlock()
	for _, c := range cs {
		for _, fn := range obs {
			fn(Event{Connected: c.connected, Offline: c.offline, Device: c.dev})
		}
	}
}
