#include "redistribute/counting_communicator.hpp"

#include <utility>

#include "plan/comm_string.hpp"

namespace meshgate {

std::string IssuedComm::to_string() const {
  return format_comm_string(kind, group, reduce_op, src_tensor_dim, dst_tensor_dim);
}

std::vector<std::string> CommLog::strings() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const IssuedComm& c : entries_) out.push_back(c.to_string());
  return out;
}

std::int64_t CommLog::bytes() const {
  std::int64_t b = 0;
  for (const IssuedComm& c : entries_) b += c.bytes;
  return b;
}

CountingCommunicator::CountingCommunicator(std::unique_ptr<comm::Communicator> inner,
                                           std::string group, CommLog* log)
    : ForwardingCommunicator(std::move(inner)), group_(std::move(group)), log_(log) {}

void CountingCommunicator::annotate(std::int64_t src_tensor_dim, std::int64_t dst_tensor_dim,
                                    ReduceOp op) {
  src_dim_ = src_tensor_dim;
  dst_dim_ = dst_tensor_dim;
  op_ = op;
}

void CountingCommunicator::note(StepKind kind, std::int64_t bytes) {
  if (log_) {
    log_->record(IssuedComm{kind, group_, op_, src_dim_, dst_dim_, inner().size(), bytes});
  }
  src_dim_ = dst_dim_ = -1;
  op_ = ReduceOp::sum;
}

void CountingCommunicator::all_reduce(const void* send, void* recv, std::size_t count,
                                      comm::DType dtype, comm::ReduceOp op) {
  inner().all_reduce(send, recv, count, dtype, op);
  note(StepKind::all_reduce, static_cast<std::int64_t>(count * comm::element_size(dtype)));
}

void CountingCommunicator::all_gather(const void* send, void* recv, std::size_t count,
                                      comm::DType dtype) {
  inner().all_gather(send, recv, count, dtype);
  note(StepKind::all_gather,
       static_cast<std::int64_t>(count * comm::element_size(dtype)) * inner().size());
}

void CountingCommunicator::reduce_scatter(const void* send, void* recv, std::size_t count,
                                          comm::DType dtype, comm::ReduceOp op) {
  inner().reduce_scatter(send, recv, count, dtype, op);
  note(StepKind::reduce_scatter,
       static_cast<std::int64_t>(count * comm::element_size(dtype)) * inner().size());
}

void CountingCommunicator::all_to_all(const void* send, void* recv, std::size_t count,
                                      comm::DType dtype) {
  inner().all_to_all(send, recv, count, dtype);
  note(StepKind::all_to_all,
       static_cast<std::int64_t>(count * comm::element_size(dtype)) * inner().size());
}

}  // namespace meshgate
