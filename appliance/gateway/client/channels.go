package client

import (
	"context"
	"net/http"

	"github.com/perchhq/perch/appliance/api"
)

// ApprovePairing admits the chat sender of a pairing code.
func (c *Client) ApprovePairing(ctx context.Context, code string) (api.Approval, error) {
	var a api.Approval
	err := c.do(ctx, http.MethodPost, "/admin/channels/approve", api.ApproveRequest{Code: code}, &a)
	return a, err
}

// Pairings lists the senders waiting for approval.
func (c *Client) Pairings(ctx context.Context) ([]api.Pairing, error) {
	out := []api.Pairing{}
	err := c.do(ctx, http.MethodGet, "/admin/channels/pairing", nil, &out)
	return out, err
}
