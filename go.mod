module github.com/cert-manager/csi-lib

go 1.26.0

require (
	github.com/container-storage-interface/spec v1.12.0
	github.com/go-logr/logr v1.4.4
	k8s.io/mount-utils v0.36.3
)

require (
	github.com/moby/sys/mountinfo v0.7.2 // indirect
	golang.org/x/net v0.58.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260610212136-7ab31c22f7ad // indirect
	google.golang.org/grpc v1.83.2 // indirect
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/utils v0.0.0-20260626114624-be93311217bd // indirect
)
