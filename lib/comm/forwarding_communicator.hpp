#pragma once
// A Communicator that forwards every call to an inner one it owns: the base of the wrappers
// that watch or change a few calls (a log of the collectives issued, a backend made wrong on
// purpose in a test) and must leave every other call as the inner backend makes it. A wrapper
// overrides only what it changes; a call added to Communicator is forwarded here once, not in
// every wrapper, where a missed override would fall back to Communicator's "does not support"
// default instead of reaching the backend.
#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"

namespace meshgate::comm {

class ForwardingCommunicator : public Communicator {
 public:
  // `inner` must not be null.
  explicit ForwardingCommunicator(std::unique_ptr<Communicator> inner)
      : inner_(std::move(inner)) {}

  std::string_view backend() const override { return inner_->backend(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                  ReduceOp op) override {
    inner_->all_reduce(send, recv, count, dtype, op);
  }
  void all_gather(const void* send, void* recv, std::size_t count, DType dtype) override {
    inner_->all_gather(send, recv, count, dtype);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                      ReduceOp op) override {
    inner_->reduce_scatter(send, recv, count, dtype, op);
  }
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype) override {
    inner_->all_to_all(send, recv, count, dtype);
  }
  void broadcast(const void* send, void* recv, std::size_t count, DType dtype,
                 int root) override {
    inner_->broadcast(send, recv, count, dtype, root);
  }
  void barrier() override { inner_->barrier(); }
  // The inner backend's group communicator, not wrapped: a wrapper that should watch its groups
  // too wraps them in its own override.
  std::unique_ptr<Communicator> split(const std::vector<std::vector<int>>& groups) override {
    return inner_->split(groups);
  }

  void* allocate(std::size_t bytes) override { return inner_->allocate(bytes); }
  void deallocate(void* ptr) override { inner_->deallocate(ptr); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    inner_->copy_from_host(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    inner_->copy_to_host(dst, src, bytes);
  }
  void synchronize() override { inner_->synchronize(); }

 protected:
  Communicator& inner() const { return *inner_; }

 private:
  std::unique_ptr<Communicator> inner_;
};

}  // namespace meshgate::comm
