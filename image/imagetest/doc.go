// Package imagetest tests the flashable images as they are shipped: it
// builds them with image/build.sh, inspects their partitions and files, and
// boots them in QEMU (TCG) against fakes of what lies outside the board — a
// language-model provider, an NTP server and Perch's apt repository, all on
// the host, which the guest reaches at 10.0.2.2 through QEMU's user network.
//
// The tests carry the build tag imagetest and run only through `make
// image-test` (image/image-test.sh), which builds the .debs and passes them
// in PERCH_IMAGE_* variables; they need root, QEMU and about a gigabyte of
// disk per image. Every QEMU process is bounded in time and killed by its
// PID when its test ends.
package imagetest
