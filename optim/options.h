// The optimizers' options: plain structs with designated initializers and PyTorch's defaults, handed as
// they are to the kernels. fields() lists the members by name (the hyperparameters a checkpoint stores);
// validate() throws for values PyTorch refuses.
#pragma once

#include <array>

#include "framework/error.h"

namespace mantissa {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0, as in PyTorch

  template <typename Self, typename F>
  static void fields(Self& o, F&& f) {
    f("lr", o.lr);
    f("momentum", o.momentum);
    f("dampening", o.dampening);
    f("weight_decay", o.weight_decay);
    f("nesterov", o.nesterov);
  }
  void validate(const char* optimizer) const {
    MT_CHECK(lr >= 0.0, optimizer, ": invalid learning rate ", lr);
    MT_CHECK(momentum >= 0.0, optimizer, ": invalid momentum ", momentum);
    MT_CHECK(weight_decay >= 0.0, optimizer, ": invalid weight_decay ", weight_decay);
    MT_CHECK(!nesterov || (momentum > 0.0 && dampening == 0.0), optimizer,
             ": Nesterov momentum requires a momentum and zero dampening, got momentum ", momentum, " dampening ",
             dampening);
  }
};

// Adam's and AdamW's options (the same fields; AdamW's weight decay defaults to 1e-2 as in PyTorch).
struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;  // normalise by the running maximum of the second moment

  template <typename Self, typename F>
  static void fields(Self& o, F&& f) {
    f("lr", o.lr);
    f("beta1", o.betas[0]);
    f("beta2", o.betas[1]);
    f("eps", o.eps);
    f("weight_decay", o.weight_decay);
    f("amsgrad", o.amsgrad);
  }
  void validate(const char* optimizer) const {
    MT_CHECK(lr >= 0.0, optimizer, ": invalid learning rate ", lr);
    MT_CHECK(eps >= 0.0, optimizer, ": invalid epsilon ", eps);
    MT_CHECK(betas[0] >= 0.0 && betas[0] < 1.0, optimizer, ": invalid beta1 ", betas[0], " (must be in [0, 1))");
    MT_CHECK(betas[1] >= 0.0 && betas[1] < 1.0, optimizer, ": invalid beta2 ", betas[1], " (must be in [0, 1))");
    MT_CHECK(weight_decay >= 0.0, optimizer, ": invalid weight_decay ", weight_decay);
  }
};

struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;

  template <typename Self, typename F>
  static void fields(Self& o, F&& f) {
    f("lr", o.lr);
    f("beta1", o.betas[0]);
    f("beta2", o.betas[1]);
    f("eps", o.eps);
    f("weight_decay", o.weight_decay);
    f("amsgrad", o.amsgrad);
  }
  void validate(const char* optimizer) const { as_adam().validate(optimizer); }
  AdamOptions as_adam() const {
    return {.lr = lr, .betas = betas, .eps = eps, .weight_decay = weight_decay, .amsgrad = amsgrad};
  }
};

// Lion's options: the defaults of the reference implementation (lucidrains/lion-pytorch), whose learning
// rate is smaller than Adam's (the paper suggests 3 to 10 times smaller: the sign update has size lr in
// every coordinate).
struct LionOptions {
  double lr = 1e-4;
  std::array<double, 2> betas{0.9, 0.99};  // beta1 mixes the update direction, beta2 the momentum
  double weight_decay = 0.0;               // decoupled, as AdamW's: p *= 1 - lr * weight_decay

  template <typename Self, typename F>
  static void fields(Self& o, F&& f) {
    f("lr", o.lr);
    f("beta1", o.betas[0]);
    f("beta2", o.betas[1]);
    f("weight_decay", o.weight_decay);
  }
  void validate(const char* optimizer) const {
    MT_CHECK(lr >= 0.0, optimizer, ": invalid learning rate ", lr);
    MT_CHECK(betas[0] >= 0.0 && betas[0] <= 1.0, optimizer, ": invalid beta1 ", betas[0], " (must be in [0, 1])");
    MT_CHECK(betas[1] >= 0.0 && betas[1] <= 1.0, optimizer, ": invalid beta2 ", betas[1], " (must be in [0, 1])");
    MT_CHECK(weight_decay >= 0.0, optimizer, ": invalid weight_decay ", weight_decay);
  }
};

}  // namespace mantissa
