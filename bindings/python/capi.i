/* SWIG interface for fmha's public C API: fmha.capi.
 *
 * This module is the C header, wrapped as-is: every function, enum value and
 * struct of include/fmha/fmha.h, under its C name. The Pythonic layer
 * (fmha/__init__.py) is written on top of it; use fmha.capi directly only to
 * drive the C API by hand.
 *
 * Python conventions at the boundary:
 *   - every pointer the caller supplies (tensor data, lse, workspace, CUDA
 *     stream) is a Python int holding the address, or None for NULL; reading
 *     such a field gives an int (0 for NULL);
 *   - the int32 arrays of the serving layouts (cu_seqlens_q, cu_seqlens_k,
 *     seqused_k, block_table) and the float arrays of the inference
 *     numerics (q_descale, k_descale, v_descale, alibi_slopes) are
 *     addresses too (params.bias is an fmha_tensor, like q);
 *   - dims and strides are sequences of 4 ints;
 *   - fmha_merge_params owns its o_parts and lse_parts arrays: set them
 *     with params.set_parts([fmha_tensor, ...], [lse address, ...]), which
 *     copies both and sets num_parts;
 *   - fmha_create(kind, ordinal) returns [status, handle];
 *   - fmha_forward_workspace_size(handle, params) returns [status, bytes];
 *   - fmha_forward_explain(handle, params, maxlen) returns [status, text].
 * The GIL is released while a C function runs (swig -threads), so CPU
 * forwards on different handles from different threads run in parallel.
 */
%module(package="fmha") capi

%{
#include <stdlib.h>
#include <string.h>
#include "fmha/fmha.h"
%}

%include <stdint.i>
%include <cstring.i>

/* ---- addresses as Python ints ------------------------------------------ */
%define FMHA_ADDRESS_TYPEMAPS(TYPE, NAME)
%typemap(in) TYPE NAME {
  if ($input == Py_None) {
    $1 = NULL;
  } else if (PyLong_Check($input)) {
    void* addr_ = PyLong_AsVoidPtr($input);
    if (addr_ == NULL && PyErr_Occurred()) SWIG_fail;
    $1 = ($1_ltype)addr_;
  } else {
    SWIG_exception_fail(SWIG_TypeError, "in '$symname', argument '$1_name' must be an int address or None");
  }
}
%typemap(typecheck, precedence=SWIG_TYPECHECK_POINTER) TYPE NAME {
  $1 = ($input == Py_None || PyLong_Check($input)) ? 1 : 0;
}
%typemap(out) TYPE NAME {
  $result = PyLong_FromVoidPtr((void*)$1);
}
%enddef

FMHA_ADDRESS_TYPEMAPS(void*, data)
FMHA_ADDRESS_TYPEMAPS(float*, lse)
FMHA_ADDRESS_TYPEMAPS(void*, workspace)
FMHA_ADDRESS_TYPEMAPS(void*, cuda_stream)
FMHA_ADDRESS_TYPEMAPS(const int32_t*, cu_seqlens_q)
FMHA_ADDRESS_TYPEMAPS(const int32_t*, cu_seqlens_k)
FMHA_ADDRESS_TYPEMAPS(const int32_t*, seqused_k)
FMHA_ADDRESS_TYPEMAPS(const int32_t*, block_table)
FMHA_ADDRESS_TYPEMAPS(const float*, q_descale)
FMHA_ADDRESS_TYPEMAPS(const float*, k_descale)
FMHA_ADDRESS_TYPEMAPS(const float*, v_descale)
FMHA_ADDRESS_TYPEMAPS(const float*, alibi_slopes)

/* ---- int64_t[4] members as sequences ----------------------------------- */
%typemap(in) int64_t [4] (int64_t temp[4]) {
  if (!PySequence_Check($input) || PySequence_Size($input) != 4) {
    SWIG_exception_fail(SWIG_TypeError, "in '$symname', expected a sequence of 4 ints");
  }
  for (Py_ssize_t i_ = 0; i_ < 4; ++i_) {
    PyObject* item_ = PySequence_GetItem($input, i_);
    if (item_ == NULL) SWIG_fail;
    long long v_ = PyLong_AsLongLong(item_);
    Py_DECREF(item_);
    if (v_ == -1 && PyErr_Occurred()) SWIG_fail;
    temp[i_] = (int64_t)v_;
  }
  $1 = temp;
}
%typemap(memberin) int64_t [4] {
  memcpy($1, $input, 4 * sizeof(int64_t));
}
%typemap(out) int64_t [4] {
  $result = Py_BuildValue("(LLLL)", (long long)$1[0], (long long)$1[1], (long long)$1[2],
                          (long long)$1[3]);
}

/* ---- params.kernel owns a copy of its string --------------------------- */
/* The C struct holds a borrowed const char*. Here each proxy owns a copy,
 * freed when replaced and when the proxy is destroyed (see %extend below). */
%typemap(memberin) const char* kernel {
  free((char*)$1);
  $1 = $input ? strdup($input) : NULL;
}

/* ---- output arguments -------------------------------------------------- */
%typemap(in, numinputs=0) fmha_handle* handle (fmha_handle temp = NULL) {
  $1 = &temp;
}
%typemap(argout) fmha_handle* handle {
  $result = SWIG_AppendOutput($result,
      SWIG_NewPointerObj(SWIG_as_voidptr(*$1), $descriptor(struct fmha_context*), 0));
}
%typemap(in, numinputs=0) size_t* bytes (size_t temp = 0) {
  $1 = &temp;
}
%typemap(argout) size_t* bytes {
  $result = SWIG_AppendOutput($result, PyLong_FromSize_t(*$1));
}
%cstring_output_maxsize(char* buf, size_t len);

/* fmha_forward_params: the constructor applies fmha_forward_params_init(),
 * so a fresh proxy is already a valid default. */
%extend fmha_forward_params {
  fmha_forward_params() {
    fmha_forward_params* p = (fmha_forward_params*)calloc(1, sizeof *p);
    if (p != NULL) fmha_forward_params_init(p);
    return p;
  }
  ~fmha_forward_params() {
    free((char*)$self->kernel);
    free($self);
  }
}
/* fmha_forward_params_init() on a proxy would NULL its kernel without
 * freeing it; the constructor already initializes, so it is not wrapped. */
%ignore fmha_forward_params_init;

/* fmha_merge_params: the constructor applies fmha_merge_params_init(); the
 * proxy owns copies of the o_parts and lse_parts arrays (set_parts), freed
 * when replaced and when the proxy is destroyed. The raw pointer members
 * are not exposed. */
%ignore fmha_merge_params::o_parts;
%ignore fmha_merge_params::lse_parts;
%ignore fmha_merge_params_init;
/* set_parts calls the Python C API: it keeps the GIL (swig -threads would
 * release it around the call). */
%nothread fmha_merge_params::set_parts;
%extend fmha_merge_params {
  fmha_merge_params() {
    fmha_merge_params* p = (fmha_merge_params*)calloc(1, sizeof *p);
    if (p != NULL) fmha_merge_params_init(p);
    return p;
  }
  ~fmha_merge_params() {
    free((void*)$self->o_parts);
    free((void*)$self->lse_parts);
    free($self);
  }
  /* tensors: a sequence of fmha_tensor; lses: a sequence of int addresses
   * (or None) of the same length. Copies both; sets num_parts. */
  PyObject* set_parts(PyObject* tensors, PyObject* lses) {
    if (!PySequence_Check(tensors) || !PySequence_Check(lses)) {
      PyErr_SetString(PyExc_TypeError, "set_parts: expected two sequences");
      return NULL;
    }
    const Py_ssize_t n = PySequence_Size(tensors);
    if (n < 0 || PySequence_Size(lses) != n || n > INT32_MAX) {
      PyErr_SetString(PyExc_ValueError, "set_parts: tensors and lses differ in length");
      return NULL;
    }
    fmha_tensor* parts = (fmha_tensor*)calloc(n > 0 ? (size_t)n : 1, sizeof *parts);
    const float** lse = (const float**)calloc(n > 0 ? (size_t)n : 1, sizeof *lse);
    if (parts == NULL || lse == NULL) {
      free(parts);
      free((void*)lse);
      return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* t = PySequence_GetItem(tensors, i);
      PyObject* l = t != NULL ? PySequence_GetItem(lses, i) : NULL;
      void* tp = NULL;
      int ok = t != NULL && l != NULL && SWIG_IsOK(SWIG_ConvertPtr(t, &tp, SWIGTYPE_p_fmha_tensor, 0)) && tp != NULL;
      if (ok) {
        parts[i] = *(const fmha_tensor*)tp;
        if (l == Py_None) {
          lse[i] = NULL;
        } else if (PyLong_Check(l)) {
          lse[i] = (const float*)PyLong_AsVoidPtr(l);
          ok = !(lse[i] == NULL && PyErr_Occurred());
        } else {
          ok = 0;
        }
      }
      Py_XDECREF(t);
      Py_XDECREF(l);
      if (!ok) {
        free(parts);
        free((void*)lse);
        if (!PyErr_Occurred())
          PyErr_Format(PyExc_TypeError, "set_parts: item %zd is not (fmha_tensor, int address or None)", i);
        return NULL;
      }
    }
    free((void*)$self->o_parts);
    free((void*)$self->lse_parts);
    $self->o_parts = parts;
    $self->lse_parts = lse;
    $self->num_parts = (int32_t)n;
    Py_RETURN_NONE;
  }
}

/* SWIG cannot evaluate sizeof in a macro; the C compiler does it here
 * (declared before the header so the macro is not expanded in the name). */
%constant uint32_t FMHA_FORWARD_PARAMS_SIZE_V1 = FMHA_FORWARD_PARAMS_SIZE_V1;
%constant uint32_t FMHA_FORWARD_PARAMS_SIZE_V2 = FMHA_FORWARD_PARAMS_SIZE_V2;
%constant uint32_t FMHA_FORWARD_PARAMS_SIZE_V3 = FMHA_FORWARD_PARAMS_SIZE_V3;
%constant uint32_t FMHA_MERGE_PARAMS_SIZE_V1 = FMHA_MERGE_PARAMS_SIZE_V1;

%include "fmha/fmha.h"
