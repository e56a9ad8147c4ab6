// The one error type of attend's file readers and writers: a message naming the file and, where
// there is one, the tensor.
#pragma once

#include <stdexcept>
#include <string>

namespace attend::io {

class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace attend::io
