package deps
import (
 _ "k8s.io/client-go/tools/clientcmd"
 _ "k8s.io/apiserver/pkg/endpoints/request"
 _ "k8s.io/apiserver/pkg/server/filters"
 _ "k8s.io/apimachinery/pkg/util/proxy"
 _ "golang.org/x/net/http2"
 _ "go.uber.org/fx"
 _ "go.uber.org/fx/fxtest"
 _ "go.uber.org/goleak"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "github.com/prometheus/client_golang/prometheus/testutil"
 _ "github.com/prometheus/client_golang/prometheus/promhttp"
 _ "github.com/hashicorp/golang-lru/v2/expirable"
 _ "github.com/fsnotify/fsnotify"
 _ "github.com/spf13/pflag"
)
