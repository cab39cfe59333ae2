// gpu-plugin: a Kubernetes device plugin for the lab's GPU stand-ins (LAB_CGROUPS=1, real-nodes.sh).
//
// It gives a pod GPUs as NVIDIA's device plugin does without CDI: nvidia.com/gpu devices nvidia0..N-1,
// each allocated as a device spec (host path = container path), so the runtime creates the device
// file in the container and lets the container's device cgroup open it. The stand-ins are character
// devices with NVIDIA's numbers and no driver behind them (e2e/lab/up.sh). Without it a pod's device
// cgroup refuses every GPU, and Slurm's ConstrainDevices in the slurmd pod could not be tested.
//
// A container given GPUs also gets DIR/nvidiactl, NVIDIA's control device, when it exists (as
// NVIDIA's plugin gives /dev/nvidiactl with every allocation).
//
// Usage: gpu-plugin DIR COUNT (the stand-ins DIR/nvidia0..COUNT-1). Run in the node's mount
// namespace; it registers again whenever the kubelet's socket is made anew (a restarted kubelet).
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	resource = "nvidia.com/gpu"
	endpoint = "slurmpool-lab-gpu.sock"
)

type plugin struct {
	api.UnimplementedDevicePluginServer
	dir   string
	count int
}

func (p *plugin) GetDevicePluginOptions(context.Context, *api.Empty) (*api.DevicePluginOptions, error) {
	return &api.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once, all healthy, and holds the stream open.
func (p *plugin) ListAndWatch(_ *api.Empty, stream grpc.ServerStreamingServer[api.ListAndWatchResponse]) error {
	devices := make([]*api.Device, p.count)
	for i := range devices {
		devices[i] = &api.Device{ID: fmt.Sprintf("nvidia%d", i), Health: api.Healthy}
	}
	if err := stream.Send(&api.ListAndWatchResponse{Devices: devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *api.AllocateRequest) (*api.AllocateResponse, error) {
	out := &api.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		r := &api.ContainerAllocateResponse{}
		for _, id := range c.DevicesIds {
			path := filepath.Join(p.dir, id)
			r.Devices = append(r.Devices, &api.DeviceSpec{HostPath: path, ContainerPath: path, Permissions: "rw"})
		}
		if ctl := filepath.Join(p.dir, "nvidiactl"); len(c.DevicesIds) > 0 && exists(ctl) {
			r.Devices = append(r.Devices, &api.DeviceSpec{HostPath: ctl, ContainerPath: ctl, Permissions: "rw"})
		}
		out.ContainerResponses = append(out.ContainerResponses, r)
	}
	return out, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func register() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+api.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = api.NewRegistrationClient(conn).Register(ctx, &api.RegisterRequest{
		Version: api.Version, Endpoint: endpoint, ResourceName: resource, Options: &api.DevicePluginOptions{},
	})
	return err
}

// socketID identifies the kubelet's socket file: a restarted kubelet makes a new one.
func socketID() (uint64, bool) {
	fi, err := os.Stat(api.KubeletSocket)
	if err != nil {
		return 0, false
	}
	return uint64(fi.ModTime().UnixNano()), true
}

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: gpu-plugin DIR COUNT")
	}
	count, err := strconv.Atoi(os.Args[2])
	if err != nil || count < 1 {
		log.Fatalf("COUNT must be a positive number, not %q", os.Args[2])
	}
	sock := filepath.Join(api.DevicePluginPath, endpoint)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatal(err)
	}
	server := grpc.NewServer()
	api.RegisterDevicePluginServer(server, &plugin{dir: os.Args[1], count: count})
	go func() { log.Fatal(server.Serve(lis)) }()

	var registered uint64
	for {
		if id, ok := socketID(); ok && id != registered {
			if err := register(); err != nil {
				log.Printf("register with the kubelet: %v", err)
			} else {
				registered = id
				log.Printf("registered %d %s (%s/nvidia*)", count, resource, os.Args[1])
			}
		}
		time.Sleep(time.Second)
	}
}
