package harness

import (
	"context"
	"fmt"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// WaitAuthorized waits until every apiserver allows user to do verb on
// resource (e.g. "configmaps", or "endpointslices.discovery.k8s.io" for a
// resource of a group) in namespace. Each apiserver authorizes from its own RBAC
// informer, so a fresh RoleBinding is honoured by one apiserver before
// another; a client that is spread over all of them sees the laggard.
func (cp *ControlPlane) WaitAuthorized(ctx context.Context, user, verb, resource, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// "endpointslices.discovery.k8s.io" names a resource of a group, as
	// kubectl spells it; core resources have no dot.
	res, group, _ := strings.Cut(resource, ".")
	review := &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: group, Resource: res},
		},
	}
	for _, a := range cp.APIServers {
		cfg := rest.CopyConfig(cp.Admin)
		cfg.Host = a.URL
		cfg.QPS, cfg.Burst = 100, 200
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		for {
			res, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err == nil && res.Status.Allowed {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("apiserver %d still does not let %s %s %s in %q (last error %v)", a.Index+1, user, verb, resource, namespace, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}
