// Package cputime reads the CPU time (user plus system) used by this process
// ([Process]) or by the calling OS thread ([Thread]). Benchmarks report it
// beside wall-clock time: on a shared, oversubscribed machine wall-clock
// time includes the time a benchmark sat descheduled, CPU time does not.
//
// Process is measured on Unix systems, Thread on Linux only; elsewhere they
// report that they measured nothing.
package cputime
