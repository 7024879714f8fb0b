package provider

import (
	"context"
	"fmt"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
)

// cloudPlatformScope is what the cloud-model provider's ADC tokens need.
const cloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"

// adcTokenSource reads application default credentials (the file named by
// GOOGLE_APPLICATION_CREDENTIALS, gcloud's well-known file, or the metadata
// server) and returns a source that refreshes access tokens itself.
func adcTokenSource(ctx context.Context) (oauth2.TokenSource, error) {
	creds, err := google.FindDefaultCredentials(context.WithoutCancel(ctx), cloudPlatformScope)
	if err != nil {
		return nil, fmt.Errorf("cannot read application default credentials: %v; run 'gcloud auth application-default login' or point GOOGLE_APPLICATION_CREDENTIALS at a service-account key file", err)
	}
	return oauth2.ReuseTokenSource(nil, creds.TokenSource), nil
}
